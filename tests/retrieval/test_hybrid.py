"""Reciprocal-rank fusion, checked against rankings worked out by hand."""

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, DenseRetriever, Hits, HybridRetriever, Retriever, SparseParams
from rollout.retrieval.encoder import TextEncoder


class FixedRanking:
    """A retriever that returns the same ranking for every query and records the depth asked."""

    def __init__(self, name: str, ranking: list[int], num_passages: int = 10) -> None:
        self.name = name
        self.ranking = ranking
        self.num_passages = num_passages
        self.asked: list[int] = []

    def search(self, queries: Sequence[str], k: int) -> Hits:
        self.asked.append(k)
        row = (self.ranking + [-1] * k)[:k]
        indices = np.tile(np.asarray(row, dtype=np.int64), (len(queries), 1))
        # Fusion reads only the order (and a sparse score of 0 as "no match").
        scores = np.where(indices >= 0, np.arange(k, 0, -1, dtype=np.float32), -np.inf).astype(np.float32)
        return Hits(indices, scores)


def test_hand_computed_example() -> None:
    # rrf_k=1: rank r contributes 1/(1 + r).
    #   dense  [3, 1, 2, 0]  -> 3: 1/2, 1: 1/3, 2: 1/4, 0: 1/5
    #   sparse [1, 4, 3]     -> 1: 1/2, 4: 1/3, 3: 1/4
    #   fused  1: 5/6, 3: 3/4, 4: 1/3, 2: 1/4, 0: 1/5
    dense, sparse = FixedRanking("dense", [3, 1, 2, 0]), FixedRanking("sparse", [1, 4, 3])
    hybrid = HybridRetriever(dense, sparse, rrf_k=1, candidates=4)
    hits = hybrid.search(["q1", "q2"], k=4)
    assert hits.indices.tolist() == [[1, 3, 4, 2]] * 2
    expected = [Fraction(5, 6), Fraction(3, 4), Fraction(1, 3), Fraction(1, 4)]
    np.testing.assert_array_equal(hits.scores, np.array([[float(f) for f in expected]] * 2, dtype=np.float32))
    assert hits.scores.dtype == np.float32 and hits.indices.dtype == np.int64


def test_default_rrf_k_is_60() -> None:
    hits = HybridRetriever(FixedRanking("dense", [2, 0]), FixedRanking("sparse", [0, 5])).search(["q"], 3)
    assert hits.indices.tolist() == [[0, 2, 5]]
    np.testing.assert_allclose(hits.scores[0], [1 / 62 + 1 / 61, 1 / 61, 1 / 62], rtol=1e-6)


def test_ties_go_to_the_lower_row() -> None:
    # 7 and 5 are first in one ranking and second in the other: equal fused scores.
    hits = HybridRetriever(FixedRanking("dense", [7, 5]), FixedRanking("sparse", [5, 7])).search(["q"], 2)
    assert hits.indices.tolist() == [[5, 7]]
    assert hits.scores[0, 0] == hits.scores[0, 1]


def test_each_retriever_ranks_max_of_candidates_and_k() -> None:
    dense, sparse = FixedRanking("dense", [0, 1]), FixedRanking("sparse", [1, 0])
    hybrid = HybridRetriever(dense, sparse, candidates=5)
    hybrid.search(["q"], 3)
    hybrid.search(["q"], 8)
    assert dense.asked == sparse.asked == [5, 8]


def test_fewer_passages_than_k_pads() -> None:
    hits = HybridRetriever(FixedRanking("dense", [0, 1]), FixedRanking("sparse", [1])).search(["q"], 4)
    assert hits.indices.tolist() == [[1, 0, -1, -1]]
    assert np.all(np.isneginf(hits.scores[0, 2:]))


def test_sparse_hits_without_a_matching_term_are_not_ranked() -> None:
    class NoMatchAfterFirst(FixedRanking):
        def search(self, queries: Sequence[str], k: int) -> Hits:
            hits = super().search(queries, k)
            hits.scores[:, 1:] = np.where(hits.indices[:, 1:] >= 0, 0.0, -np.inf)
            return hits

    hits = HybridRetriever(FixedRanking("dense", [2, 1]), NoMatchAfterFirst("sparse", [1, 0, 2])).search(["q"], 3)
    # Rows 0 and 2 are in the sparse list only as zero-score filler: 2 keeps its dense rank alone.
    assert hits.indices.tolist() == [[1, 2, -1]]
    np.testing.assert_allclose(hits.scores[0, :2], [1 / 62 + 1 / 61, 1 / 61], rtol=1e-6)


def test_no_queries_and_bad_arguments() -> None:
    hybrid = HybridRetriever(FixedRanking("dense", [0]), FixedRanking("sparse", [0]))
    assert hybrid.search([], 3).indices.shape == (0, 3)
    with pytest.raises(RetrievalError, match="wrap a single query"):
        hybrid.search("one query", 3)
    with pytest.raises(RetrievalError, match="same corpus"):
        HybridRetriever(FixedRanking("dense", [0], 10), FixedRanking("sparse", [0], 11))
    with pytest.raises(RetrievalError, match="rrf_k"):
        HybridRetriever(FixedRanking("dense", [0]), FixedRanking("sparse", [0]), rrf_k=-1)


def test_real_retrievers_fuse_as_their_rankings_say(encoder: TextEncoder, facts: list[Passage]) -> None:
    dense, sparse = DenseRetriever.build(facts, encoder=encoder), BM25Retriever.build(facts, SparseParams())
    hybrid: Retriever = HybridRetriever(dense, sparse, candidates=len(facts))
    assert hybrid.name == "hybrid"
    queries = ["VX-1234 spectrometer", "who discovered antibiotics"]
    hits = hybrid.search(queries, 3)
    d = dense.search(queries, len(facts)).indices
    s_hits = sparse.search(queries, len(facts))
    s = np.where(s_hits.scores == 0, -1, s_hits.indices)
    for row in range(len(queries)):
        fused = {
            int(p): sum(1 / (60 + 1 + ranking[row].tolist().index(p)) for ranking in (d, s) if p in ranking[row])
            for p in set(d[row].tolist()) | set(s[row].tolist())
            if p >= 0
        }
        best = sorted(fused, key=lambda p: (-fused[p], p))[:3]
        assert hits.indices[row].tolist() == best
    assert facts[hits.indices[0, 0]].title == "Device VX-1234"
    assert facts[hits.indices[1, 0]].title == "Penicillin"


def test_a_query_bm25_cannot_match_is_ranked_by_the_dense_side_alone(encoder: TextEncoder, facts: list[Passage]) -> None:
    dense, sparse = DenseRetriever.build(facts, encoder=encoder), BM25Retriever.build(facts, SparseParams())
    hybrid = HybridRetriever(dense, sparse, rrf_k=60, candidates=len(facts))
    queries = ["the of and", "xylophone"]
    assert np.all(sparse.search(queries, 3).indices == -1)
    hits = hybrid.search(queries, 3)
    np.testing.assert_array_equal(hits.indices, dense.search(queries, 3).indices)
    np.testing.assert_allclose(hits.scores, [[1 / 61, 1 / 62, 1 / 63]] * 2, rtol=1e-6)
