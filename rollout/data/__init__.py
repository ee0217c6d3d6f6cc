"""Corpora and question sets: typed records and specs, loaders for files, folders of text documents and
Hugging Face datasets, chunking, the corpus store every gateway maps, and the generated demo knowledge base."""

from rollout.data.chunking import chunk_passages
from rollout.data.corpus_store import CorpusStore, open_corpus
from rollout.data.demo_kb import DemoKB, ensure_demo_kb, generate_demo_kb
from rollout.data.folder import is_source_folder
from rollout.data.loaders import load_corpus, load_corpus_spec, load_question_spec, load_questions
from rollout.data.materialize import materialize_corpus
from rollout.data.specs import CorpusSpec, QuestionSpec
from rollout.errors import DataError
from rollout.records import Passage, Question

__all__ = [
    "CorpusSpec",
    "CorpusStore",
    "DataError",
    "DemoKB",
    "Passage",
    "Question",
    "QuestionSpec",
    "chunk_passages",
    "ensure_demo_kb",
    "generate_demo_kb",
    "is_source_folder",
    "load_corpus",
    "load_corpus_spec",
    "load_question_spec",
    "load_questions",
    "materialize_corpus",
    "open_corpus",
]
