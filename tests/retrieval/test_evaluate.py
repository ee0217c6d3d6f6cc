"""Retrieval evaluation: metrics by hand on a tiny case, and the app on a small demo KB."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from rollout.paths import CONF_DIR
from rollout.records import Passage, Question
from rollout.retrieval import Hits
from rollout.retrieval.evaluate import print_table, run_eval
from rollout.retrieval.evaluation.scores import RetrieverScores, score_hits

PASSAGES = [Passage(f"p{i}", f"T{i}", text) for i, text in enumerate(["alpha", "beta Kelmor", "gamma", "delta"])]


def hits(rows: list[list[int]]) -> Hits:
    idx = np.asarray(rows, dtype=np.int64)
    return Hits(idx, np.zeros(idx.shape, dtype=np.float32))


def test_gold_passage_metrics_by_hand():
    qs = [
        Question("q1", "?", ["x"], {"gold_doc_ids": ["p1", "p3"]}),
        Question("q2", "?", ["x"], {"gold_doc_ids": ["p0"]}),
    ]
    s = score_hits(hits([[2, 1, 0], [1, 2, 3]]), qs, PASSAGES, [1, 3])
    assert s["gold"] == "passages"
    assert s["recall"] == {1: 0.0, 3: pytest.approx(0.25)}  # q1 finds p1 of two at rank 2; q2 finds nothing
    assert s["hit"] == {1: 0.0, 3: 0.5}
    assert s["mrr"] == pytest.approx((1 / 2 + 0) / 2)


def test_answer_containment_when_no_gold_ids():
    qs = [Question("q1", "?", ["kelmor"], {})]
    s = score_hits(hits([[0, 1, 2]]), qs, PASSAGES, [1, 2])
    assert s["gold"] == "answers" and s["recall"] == {1: None, 2: None}
    assert s["hit"] == {1: 0.0, 2: 1.0} and s["mrr"] == pytest.approx(0.5)


def test_chunked_passages_count_for_their_document():
    chunks = [Passage("d9#0", "T", "a", doc_id="d9"), Passage("d9#1", "T", "b", doc_id="d9")]
    s = score_hits(hits([[1, 0]]), [Question("q", "?", ["x"], {"gold_doc_ids": ["d9"]})], chunks, [1])
    assert s["recall"] == {1: 1.0} and s["mrr"] == 1.0
    assert s["gold"] == "documents"  # the gold ids name files or documents, not passages: the header says so
    both = [Question("q", "?", ["x"], {"gold_doc_ids": ["d9"]}), Question("r", "?", ["x"], {"gold_doc_ids": ["d9#1"]})]
    assert score_hits(hits([[1, 0], [0, 1]]), both, chunks, [1])["gold"] == "passages and documents"


def test_app_compares_all_retrievers(cache_dir, tmp_path):
    overrides = ["dataset.n_passages=300", "dataset.n_questions=30", f"cache_dir={cache_dir}", f"output_dir={tmp_path}"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        rows = run_eval(compose("retrieval_eval", overrides=overrides))
    by_name = {r.retriever: r for r in rows}
    assert list(by_name) == ["dense", "sparse", "hybrid"]
    for r in rows:
        assert r.n == 30 and r.gold == "passages"
        assert 0.3 < r.hit[20] <= 1.0 and 0 < r.mrr <= 1.0
    saved = json.loads((tmp_path / "retrieval_eval.json").read_text())
    assert [r["retriever"] for r in saved] == ["dense", "sparse", "hybrid"]
    table = list(csv.DictReader((tmp_path / "retrieval_eval.csv").open()))
    assert [(r["retriever"], float(r["hit@20"])) for r in table] == [(s.retriever, s.hit[20]) for s in rows]


def test_piped_table_keeps_every_header_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "40")
    ks = [1, 5, 10, 20]
    row = RetrieverScores("sparse", 30, "passages", dict.fromkeys(ks, 0.5), dict.fromkeys(ks, 0.75), 0.6, 120.0)
    print_table([row])
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("┃ retriever"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "retriever", *(f"recall@{k}" for k in ks), *(f"hit@{k}" for k in ks), "MRR", "q/s"]


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_bm25_gets_no_credit_for_a_query_it_cannot_match(backend):
    # The gold passage is row 0: filling a row with unmatched passages in row order would find it.
    from rollout.retrieval import BM25Retriever, SparseParams

    sparse = BM25Retriever.build(PASSAGES, SparseParams(backend=backend))
    qs = [Question("q1", "the of and", ["x"], {"gold_doc_ids": ["p0"]}),
          Question("q2", "xylophone", ["x"], {"gold_doc_ids": ["p0"]})]
    s = score_hits(sparse.search([q.question for q in qs], 3), qs, PASSAGES, [1, 3])
    assert s["recall"] == {1: 0.0, 3: 0.0} and s["hit"] == {1: 0.0, 3: 0.0} and s["mrr"] == 0.0


@pytest.mark.parametrize(("gold", "kind"), [(["c-0"], "passages"), (["c"], "documents"),
                                            (["c", "a"], "passages and documents")])
def test_what_gold_ids_name_is_looked_up_in_a_corpus_store_as_in_a_list(tmp_path, gold, kind):
    from rollout.data.corpus_store import CorpusStore, write_store
    from rollout.retrieval.evaluation.scores import _gold_kind

    passages = [Passage("a", "A", "alpha"), Passage("c-0", "C", "one", "c"), Passage("c-1", "C", "two", "c")]
    write_store(passages, tmp_path / "store")
    questions = [Question("q", "?", ["x"], {"gold_doc_ids": gold})]
    assert _gold_kind(questions, CorpusStore(tmp_path / "store")) == _gold_kind(questions, passages) == kind
