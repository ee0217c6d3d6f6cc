"""Hybrid retrieval: reciprocal-rank fusion (RRF) of a dense and a sparse ranking."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval.base import PAD_INDEX, Hits, Retriever, check_k, empty_hits, query_list


class HybridRetriever:
    """Fuse two retrievers over the same corpus by reciprocal rank.

    Each retriever ranks `max(candidates, k)` passages per query; a passage's fused score is
    the sum over the rankings it appears in of `1 / (rrf_k + rank)`, rank counted from 1.
    Passages are returned by fused score, ties going to the lower row number.

    Only real matches are fused: BM25 returns no passage scoring 0, and a sparse hit scoring
    exactly 0 from any other sparse retriever is left out too, so no passage is credited for a
    rank it holds only by row order. A query the sparse side cannot match is ranked by the dense
    side alone.

    The dense half goes through `dense.search`, so a batching `DenseRetriever` encodes the queries
    of concurrent hybrid searches together, and with concurrent dense searches on the same index.
    """

    name = "hybrid"

    def __init__(self, dense: Retriever, sparse: Retriever, *, rrf_k: int = 60, candidates: int = 50) -> None:
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, np.integer)) or rrf_k < 0:
            raise RetrievalError(f"rrf_k must be a non-negative integer, got {rrf_k!r}; the usual value is 60")
        check_k(candidates)
        dense_n, sparse_n = getattr(dense, "num_passages", None), getattr(sparse, "num_passages", None)
        if dense_n is not None and sparse_n is not None and dense_n != sparse_n:
            raise RetrievalError(
                f"the dense index holds {dense_n} passages and the sparse one {sparse_n}; fuse only indexes "
                "built from the same corpus"
            )
        self.dense = dense
        self.sparse = sparse
        self.rrf_k = int(rrf_k)
        self.candidates = int(candidates)
        self._num_passages = dense_n if dense_n is not None else sparse_n

    @property
    def num_passages(self) -> int | None:
        """Passages in the fused corpus; None when neither retriever reports it."""
        return self._num_passages

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Return the k passages with the highest fused score for each query (float32 scores)."""
        check_k(k)
        queries = query_list(queries)
        hits = empty_hits(len(queries), k)
        if not queries:
            return hits
        depth = max(self.candidates, k)
        sparse = self.sparse.search(queries, depth)
        rankings = (
            self.dense.search(queries, depth).indices,
            np.where(sparse.scores == 0.0, PAD_INDEX, sparse.indices),
        )
        for row in range(len(queries)):
            indices, scores = fuse([ranking[row] for ranking in rankings], rrf_k=self.rrf_k)
            take = min(k, len(indices))
            hits.indices[row, :take] = indices[:take]
            hits.scores[row, :take] = scores[:take]
        return hits


def fuse(rankings: Sequence[np.ndarray], *, rrf_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal-rank fusion of rankings (row numbers best first, -1 padding ignored).

    Returns every passage found, ordered by fused score descending then row ascending:
    int64 row numbers and their float32 scores.
    """
    rows = np.concatenate([np.asarray(r, dtype=np.int64) for r in rankings])
    contributions = np.concatenate(
        [1.0 / (rrf_k + np.arange(1, len(r) + 1, dtype=np.float64)) for r in rankings]
    )
    found = rows >= 0
    unique, inverse = np.unique(rows[found], return_inverse=True)
    # Summed in float64 so the ordering is decided before rounding to float32.
    fused = np.bincount(inverse, weights=contributions[found], minlength=len(unique))
    order = np.lexsort((unique, -fused))
    return unique[order], fused[order].astype(np.float32)
