"""bm25s and rank_bm25 agree on a generated corpus: same top 10, same scores, after save/load too."""

from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from rollout.data import generate_demo_kb
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, SparseParams, tokenize

K = 10


@pytest.fixture(scope="module")
def demo() -> tuple[list[Passage], list[str]]:
    passages, questions = generate_demo_kb(n_passages=2000, n_questions=200)
    words = ["born", "founded", "headquartered", "Rodum", "industry", "1947", "fishing"]
    identifiers = ["P-92941", "ORG-4419", "registry ID P-68965", "doc-000042"]
    odd = ["", "the of and", "zzqx unknownword", "born born born", "Rodum!!!"]
    return passages, [q.question for q in questions] + words + identifiers + odd


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "stemmed"])
def pair(request: pytest.FixtureRequest, demo) -> dict[str, BM25Retriever]:
    passages, _ = demo
    return {
        backend: BM25Retriever.build(passages, SparseParams(backend=backend, stemming=request.param))
        for backend in ("bm25s", "rank_bm25")
    }


def test_same_top_10_and_scores(pair: dict[str, BM25Retriever], demo) -> None:
    _, queries = demo
    fast, ref = pair["bm25s"].search(queries, K), pair["rank_bm25"].search(queries, K)
    np.testing.assert_array_equal(fast.indices, ref.indices)
    np.testing.assert_allclose(fast.scores, ref.scores, rtol=0, atol=1e-5)
    # The corpus is not degenerate: most questions find passages that share words with them.
    assert np.mean(fast.scores[:, 0] > 0) > 0.9


def test_scores_are_rank_bm25_okapi_with_epsilon_0(pair: dict[str, BM25Retriever], demo) -> None:
    passages, queries = demo
    params = pair["bm25s"].params
    options = {"stopwords": params.stopwords, "stemming": params.stemming}
    okapi = BM25Okapi([tokenize(p.contents, **options) for p in passages], k1=params.k1, b=params.b, epsilon=0)
    sample = queries[::9]
    hits = pair["bm25s"].search(sample, K)
    for row, query in enumerate(sample):
        expected = np.asarray(okapi.get_scores(tokenize(query, **options)), dtype=np.float64)
        found = min(K, int(np.count_nonzero(expected > 0)))  # zero scores are no match: padding
        assert np.all(hits.indices[row, found:] == -1)
        scores, indices = hits.scores[row, :found], hits.indices[row, :found]
        np.testing.assert_allclose(scores, expected[indices], rtol=0, atol=1e-5)
        np.testing.assert_allclose(scores, np.sort(expected)[::-1][:found], rtol=0, atol=1e-5)


def test_identifier_and_single_word_queries_find_their_passages(pair: dict[str, BM25Retriever], demo) -> None:
    passages, _ = demo
    hits = pair["bm25s"].search(["P-92941", "ORG-4419"], 1)
    assert "92941" in passages[hits.indices[0, 0]].contents
    assert "4419" in passages[hits.indices[1, 0]].contents


def test_unknown_words_give_no_passages_in_both(pair: dict[str, BM25Retriever]) -> None:
    for retriever in pair.values():
        hits = retriever.search(["zzqx unknownword", "", "the of and"], K)
        assert hits.indices.tolist() == [[-1] * K] * 3
        assert np.all(np.isneginf(hits.scores))


def test_more_than_the_corpus_pads_alike(pair: dict[str, BM25Retriever], demo) -> None:
    passages, _ = demo
    k = len(passages) + 3
    fast, ref = (pair[b].search(["born in Rodum", "zzqx"], k) for b in ("bm25s", "rank_bm25"))
    np.testing.assert_array_equal(fast.indices, ref.indices)
    assert np.all(fast.indices[:, -3:] == -1) and np.all(np.isneginf(fast.scores[:, -3:]))
    matched = fast.indices[0][fast.indices[0] >= 0]
    assert 0 < len(matched) < len(passages) and len(set(matched.tolist())) == len(matched)
    assert np.all(fast.scores[0, : len(matched)] > 0) and np.all(fast.indices[1] == -1)


def test_save_load_gives_identical_results(pair: dict[str, BM25Retriever], demo, tmp_path: Path) -> None:
    _, queries = demo
    for backend, retriever in pair.items():
        retriever.save(tmp_path / backend)
        loaded = BM25Retriever.load(tmp_path / backend)
        assert loaded.params == retriever.params and loaded.num_passages == retriever.num_passages
        before, after = retriever.search(queries, K), loaded.search(queries, K)
        np.testing.assert_array_equal(before.indices, after.indices)
        np.testing.assert_array_equal(before.scores, after.scores)
