"""`retriever.sparse.method`: the built-in BM25's idf, Robertson's (0 for words in over half the passages) or Lucene's
(never 0), honoured alike by the in-memory build, the bounded build, loading and the rank_bm25 backend."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import bm25s
import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, RetrievalParams, SparseParams, tokenize
from rollout.retrieval.lucene import INSTALL, LuceneRetriever, build_lucene_index, corpus_rows_of
from tests.retrieval.test_lucene import MODULES, no_lucene

ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
# "river" is in 5 of 6 passages (and twice in one), "delta" in 2: Robertson's idf of "river" is 0.
TEXTS = ["river delta", "river bank river", "river comet", "river delta dune", "river moraine", "desert dune"]
PASSAGES = [Passage(str(i), "", text) for i, text in enumerate(TEXTS)]


def bm25s_own(method: str, idf_method: str, k1: float, b: float) -> bm25s.BM25:
    """bm25s indexing the same tokens itself, with the given tf and idf variants."""
    corpus = [tokenize(p.contents) for p in PASSAGES]
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus]
    model = bm25s.BM25(k1=k1, b=b, method=method, idf_method=idf_method, dtype="float64")
    model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), create_empty_token=False, show_progress=False)
    return model


def built(how: str, params: SparseParams, tmp_path: Path) -> BM25Retriever:
    if how == "build_into":  # the bounded build, then the load a run does
        return BM25Retriever.build_into(PASSAGES, tmp_path / "index", params, workers=1)
    return BM25Retriever.build(PASSAGES, params)


def all_scores(retriever: BM25Retriever, query: str) -> np.ndarray:
    """Every passage's score for `query` (0 where it is no match), from a search as deep as the corpus."""
    hits = retriever.search([query], len(PASSAGES))
    scores = np.zeros(len(PASSAGES))
    found = hits.indices[0] >= 0
    scores[hits.indices[0][found]] = hits.scores[0][found]
    return scores


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4)])
def test_both_builds_write_bm25s_own_scores_with_lucenes_idf(tmp_path, k1, b):
    params = SparseParams(method="lucene", k1=k1, b=b)
    BM25Retriever.build(PASSAGES, params).save(tmp_path / "memory")
    BM25Retriever.build_into(PASSAGES, tmp_path / "bounded", params, workers=1)
    theirs = bm25s_own("atire", "lucene", k1, b)
    theirs.save(tmp_path / "bm25s", show_progress=False)
    for folder in ("memory", "bounded"):
        for name in ARRAYS:
            assert np.array_equal(np.load(tmp_path / folder / name), np.load(tmp_path / "bm25s" / name)), (folder, name)
        stored = json.loads((tmp_path / folder / "params.index.json").read_text())
        assert (stored["method"], stored["idf_method"]) == ("atire", "lucene")
    # bm25s' method="lucene" is the same idf with Lucene's tf part, which leaves out the factor (k1 + 1): the same
    # ranking, every score divided by k1 + 1.
    lucene_tf = bm25s_own("lucene", "lucene", k1, b).scores["data"]
    np.testing.assert_allclose(np.load(tmp_path / "bounded" / ARRAYS[0]), lucene_tf * (k1 + 1), rtol=1e-12)


@pytest.mark.parametrize("how", ["build", "build_into"])
@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_lucenes_idf_by_hand(tmp_path, how, backend):
    retriever = built(how, SparseParams(backend=backend, method="lucene"), tmp_path)
    n, lengths = len(PASSAGES), [len(tokenize(p.contents)) for p in PASSAGES]
    avg = sum(lengths) / n
    k1, b = 1.5, 0.75

    def score(word_df: int, tf: int, length: int) -> float:
        idf = math.log(1 + (n - word_df + 0.5) / (word_df + 0.5))
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))

    expected = [score(5, text.split().count("river"), lengths[i]) + score(2, text.split().count("delta"), lengths[i])
                for i, text in enumerate(TEXTS)]
    np.testing.assert_allclose(all_scores(retriever, "river delta"), expected, rtol=1e-6)


@pytest.mark.parametrize("how", ["build", "build_into"])
@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_a_word_in_most_passages_counts_with_lucene_and_not_with_robertson(tmp_path, how, backend):
    lucene = built(how, SparseParams(backend=backend, method="lucene"), tmp_path / "lucene")
    robertson = built(how, SparseParams(backend=backend), tmp_path / "robertson")
    hits = lucene.search(["river"], 6)
    assert sorted(hits.indices[0][:5].tolist()) == [0, 1, 2, 3, 4] and hits.indices[0][5] == -1
    assert np.all(hits.scores[0][:5] > 0)
    assert hits.indices[0][0] == 1  # twice in its passage
    assert robertson.search(["river"], 6).indices[0].tolist() == [-1] * 6  # idf 0: no match


def test_both_backends_agree_with_lucenes_idf(random_passages, random_queries):
    passages, queries = random_passages(120, 3), random_queries(30, 4)
    pair = [BM25Retriever.build(passages, SparseParams(backend=backend, method="lucene", k1=0.9, b=0.4))
            for backend in ("bm25s", "rank_bm25")]
    ours, theirs = (r.search(queries, 15) for r in pair)
    assert np.array_equal(ours.indices, theirs.indices)
    np.testing.assert_allclose(ours.scores, theirs.scores, rtol=1e-6)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_the_method_is_kept_on_disk_and_an_index_of_the_other_is_refused(tmp_path, backend):
    path = tmp_path / "index"
    BM25Retriever.build_into(PASSAGES, path, SparseParams(backend=backend, method="lucene"), workers=1)
    loaded = BM25Retriever.load(path)
    assert loaded.params.method == "lucene" and all_scores(loaded, "river")[0] > 0
    with pytest.raises(RetrievalError, match="rebuild"):
        BM25Retriever.load(path, SparseParams(backend=backend))


def test_bm25s_files_whose_idf_differs_from_their_meta_are_refused(tmp_path):
    path = tmp_path / "index"
    BM25Retriever.build_into(PASSAGES, path, SparseParams(method="lucene"), workers=1)
    stored = json.loads((path / "params.index.json").read_text())
    (path / "params.index.json").write_text(json.dumps({**stored, "idf_method": "robertson"}))
    with pytest.raises(RetrievalError, match=r"hold method/idf/k1/b \('atire', 'robertson'.*idf lucene.*rebuild"):
        BM25Retriever.load(path)


def test_the_method_joins_the_cache_key_and_leaves_robertsons_as_it_was():
    robertson, lucene = (BM25Retriever.cache_params(SparseParams(method=m)) for m in ("robertson", "lucene"))
    assert "method" not in robertson  # the key of every index built before the setting existed
    assert lucene == {**robertson, "method": "lucene"}


@pytest.mark.parametrize("method", ["bm25+", "Lucene", None])
def test_an_unknown_method_is_refused_naming_the_choices(method):
    with pytest.raises(RetrievalError, match=r"retriever.sparse.method=.*use robertson .* or lucene"):
        RetrievalParams.from_dict({"sparse": {"method": method}})
    with pytest.raises(RetrievalError, match="use robertson"):
        BM25Retriever.build(PASSAGES, SparseParams(method=method))  # type: ignore[arg-type]


def test_lucenes_idf_ranks_as_pyserinis_bm25_on_the_same_words(tmp_path):
    # Words Lucene's English analyzer and rollout's tokenizer both keep whole (one stem each, no stopword) and passages
    # of at most 20 of them, whose lengths Lucene's one-byte norms hold exactly: Lucene's BM25Similarity scores
    # idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)), so the built-in BM25 with method=lucene scores k1 + 1 times
    # as much, document for document.
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        no_lucene(f"{' and '.join(missing)} not installed: {INSTALL}")
    words = "river castle engine apple violin harbor desert comet forest copper lantern meadow".split()
    rng = np.random.default_rng(11)
    passages = [Passage(f"w{i}", "", " ".join(rng.choice(words[: 3 + i % 9], size=int(rng.integers(2, 20)))))
                for i in range(60)]
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "docs.jsonl").write_text("".join(json.dumps({"id": p.id, "contents": p.text}) + "\n"
                                                          for p in passages))
    build_lucene_index(tmp_path / "input", tmp_path / "index")
    k1, b, queries = 0.9, 0.4, ["river", "river castle", "engine engine apple", "copper lantern meadow"]
    lucene = LuceneRetriever.open(tmp_path / "index", corpus_rows_of(passages), k1=k1, b=b).search(queries, 60)
    for method in ("lucene", "robertson"):
        ours = BM25Retriever.build(passages, SparseParams(method=method, k1=k1, b=b)).search(queries, 60)
        for q in range(len(queries)):
            theirs = {row: score for row, score in zip(lucene.indices[q], lucene.scores[q]) if row >= 0}
            mine = {row: score / (k1 + 1) for row, score in zip(ours.indices[q], ours.scores[q]) if row >= 0}
            if method == "lucene":
                assert mine.keys() == theirs.keys()
                for row in theirs:  # Anserini rounds its scores to 4 decimals
                    assert mine[row] == pytest.approx(theirs[row], abs=6e-5)
            else:  # "river" is in most passages: Robertson's idf drops it, Lucene's does not
                assert q == 3 or mine.keys() != theirs.keys()
