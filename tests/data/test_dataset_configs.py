"""The shipped conf/dataset files build valid specs, and their paths are all a user fills in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rollout.data import CorpusSpec, QuestionSpec, load_corpus_spec, load_question_spec, materialize_corpus
from rollout.data.dataset import dataset_preset
from rollout.records import Passage, Question
from tests.data.helpers import write_jsonl

FLASHRAG = ["nq", "hotpotqa", "2wiki", "bamboogle"]


def _sections(name: str) -> dict:
    cfg = OmegaConf.to_container(dataset_preset(name), throw_on_missing=False)  # with the files it includes
    assert isinstance(cfg, dict) and cfg["kind"] == "files" and "limit" in cfg
    return cfg


@pytest.mark.parametrize("name", [*FLASHRAG, "files", "hf"])
def test_sections_have_exactly_the_spec_fields(name: str):
    cfg = _sections(name)
    assert set(cfg["corpus"]) == {f.name for f in dataclasses.fields(CorpusSpec)}
    assert set(cfg["questions"]) == {f.name for f in dataclasses.fields(QuestionSpec)}


@pytest.mark.parametrize("name", [*FLASHRAG, "files"])
def test_flashrag_configs_need_only_the_two_paths(tmp_path: Path, name: str):
    cfg = _sections(name)
    assert cfg["corpus"]["path"] == "???" and cfg["questions"]["path"] == "???"
    corpus = write_jsonl(tmp_path / "wiki18_100w.jsonl", [{"id": "0", "contents": '"Kelmor"\nKelmor is a city.'}])
    row = {"id": "test_0", "question": "Where?", "golden_answers": ["Vandor"], "metadata": {}}
    questions = write_jsonl(tmp_path / "test.jsonl", [row])
    corpus_spec = CorpusSpec(**{**cfg["corpus"], "path": str(corpus)})
    assert load_corpus_spec(corpus_spec) == [Passage("0", '"Kelmor"', "Kelmor is a city.")]
    assert materialize_corpus(corpus_spec, tmp_path / "cache") == corpus
    question_spec = QuestionSpec(**{**cfg["questions"], "path": str(questions)})
    assert load_question_spec(question_spec) == [Question("test_0", "Where?", ["Vandor"], {})]


def test_files_config_reads_flashrag_files_and_takes_the_documented_mapping(tmp_path: Path):
    cfg = _sections("files")
    assert set(cfg["corpus"]["columns"].values()) == {None} and cfg["corpus"]["chunk_tokens"] is None
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"doc_key": "a", "heading": "A", "body": " ".join(["w"] * 150)}])
    corpus = {**cfg["corpus"], "path": str(docs), "columns": {"id": "doc_key", "title": "heading", "text": "body"},
              "chunk_tokens": 100}
    assert [(p.id, p.doc_id) for p in load_corpus_spec(CorpusSpec(**corpus))] == [("a#0", "a"), ("a#1", "a")]
    qa = write_jsonl(tmp_path / "qa.jsonl", [{"qid": 1, "question": "Q?", "answers": "x", "supporting_doc_ids": ["a"]}])
    questions = {**cfg["questions"], "path": str(qa),
                 "columns": {"id": "qid", "golden_answers": "answers", "gold_doc_ids": "supporting_doc_ids"}}
    assert load_question_spec(QuestionSpec(**questions)) == [Question("1", "Q?", ["x"], {"gold_doc_ids": ["a"]})]


def test_hf_config_names_flashrag_nq_test():
    spec = QuestionSpec(**_sections("hf")["questions"])
    spec.check()
    assert (spec.hf_name, spec.hf_config, spec.split) == ("RUC-NLPIR/FlashRAG_datasets", "nq", "test")


def test_the_documented_command_line_mapping_composes():
    from rollout.run.config import compose_run_config

    cfg = compose_run_config("dataset=files", "dataset.corpus.path=c.jsonl", "dataset.questions.path=q.jsonl",
                             "dataset.corpus.columns={id: doc_key, text: body}",
                             "dataset.questions.columns.golden_answers=answers")
    assert dict(cfg.dataset.corpus.columns) == {"id": "doc_key", "text": "body"}
    assert dict(cfg.dataset.questions.columns) == {"golden_answers": "answers"}
