"""The bounded-memory BM25 build writes bm25s' own files with the numbers of the in-memory build, whatever the chunking
and however many tokenizing workers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rollout.retrieval.bm25_build as bm25_build
from rollout.data import ensure_demo_kb, load_corpus, open_corpus
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.retrieval.params import SparseParams
from rollout.retrieval.sparse import BM25Retriever as Sparse

QUERIES = ["Veltrix founded", "Kremes Works company", "born city", "ORG-5521", "the of and", "zzzz unknown"]
ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bm25-build")
    path = ensure_demo_kb(cache).corpus_path
    reference = BM25Retriever.build(load_corpus(path))
    reference.save(cache / "reference")
    return cache, path, reference


def assert_same_index(built: Path, reference: Path) -> None:
    for name in ARRAYS:
        ours, theirs = np.load(built / name), np.load(reference / name)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), name
    for name in ("vocab.index.json", "params.index.json"):
        assert json.loads((built / name).read_text()) == json.loads((reference / name).read_text()), name


@pytest.mark.parametrize("source", ["list", "store"])
@pytest.mark.parametrize("chunk_passages", [None, 37])
def test_the_files_and_rankings_equal_the_in_memory_builds(demo, tmp_path, monkeypatch, source, chunk_passages):
    cache, path, reference = demo
    passages = load_corpus(path) if source == "list" else open_corpus(path, cache)
    if chunk_passages is not None:  # 37 passages a chunk: the vocabularies of 55 chunks merged in order
        size = sum(len(p.title) + len(p.text) + 1 for p in load_corpus(path)) / len(passages)
        monkeypatch.setattr(bm25_build, "TOKENS_PER_TEXT_BYTE", 2048 * 1024 * 1024 / 2 / (size * chunk_passages))
    built = BM25Retriever.build_into(passages, tmp_path / "index", SparseParams(), workers=1)
    assert_same_index(tmp_path / "index", cache / "reference")
    ours, theirs = built.search(QUERIES, 10), reference.search(QUERIES, 10)
    assert np.array_equal(ours.indices, theirs.indices) and np.array_equal(ours.scores, theirs.scores)


def test_tokenizing_on_worker_processes_gives_the_same_files(demo, tmp_path, monkeypatch):
    cache, path, _ = demo
    monkeypatch.setattr(bm25_build, "POOL_MIN_PASSAGES", 0)
    monkeypatch.setattr(bm25_build, "TOKENS_PER_TEXT_BYTE", 2048 * 1024 * 1024 / 3 / 40_000)  # ~7 chunks
    monkeypatch.setattr(bm25_build, "tokenize_chunk",
                        lambda *a: pytest.fail("a store's chunk was tokenized in the building process"))
    # The workers are spawned: they import the module afresh and tokenize with the real function.
    BM25Retriever.build_into(open_corpus(path, cache), tmp_path / "index", SparseParams(), workers=2)
    assert_same_index(tmp_path / "index", cache / "reference")


@pytest.mark.parametrize("params", [SparseParams(k1=0.9, b=0.4), SparseParams(stemming=True, stopwords=False)])
def test_other_parameters_match_too(tmp_path, params):
    passages = [Passage(f"p{i}", f"Title {i % 7}", f"alpha beta {'gamma ' * (i % 5)}delta{i % 3} founded founding")
                for i in range(300)]
    BM25Retriever.build(passages, params).save(tmp_path / "reference")
    BM25Retriever.build_into(passages, tmp_path / "index", params)
    assert_same_index(tmp_path / "index", tmp_path / "reference")


def test_a_corpus_of_only_stopwords_is_refused(tmp_path):
    with pytest.raises(RetrievalError, match="tokenized to nothing"):
        BM25Retriever.build_into([Passage("a", "", "the of and"), Passage("b", "", "!!")], tmp_path / "x")


def test_a_budget_below_the_floor_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(RetrievalError, match="retriever.sparse.build_memory_mb=10"):
        Sparse.build_into([Passage("a", "", "word")], tmp_path / "x", SparseParams(build_memory_mb=10))
