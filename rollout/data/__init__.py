"""Corpora and question sets: typed records, file loaders and the generated demo knowledge base."""

from rollout.data.demo_kb import DemoKB, ensure_demo_kb, generate_demo_kb
from rollout.data.errors import DataError
from rollout.data.loaders import load_corpus, load_questions
from rollout.data.records import Passage, Question

__all__ = [
    "DataError",
    "DemoKB",
    "Passage",
    "Question",
    "ensure_demo_kb",
    "generate_demo_kb",
    "load_corpus",
    "load_questions",
]
