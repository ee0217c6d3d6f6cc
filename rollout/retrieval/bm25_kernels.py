"""Top-k BM25 over bm25s' precomputed (term, passage) score matrix: our postings kernel, and bm25s' own.

`PostingsIndex.top_k` answers a batch of queries (term ids) in one call of `top_k_postings`,
which reads only the postings of the query terms and ranks ties to the lower row as rank_bm25
does. `bm25s_top_k` answers through bm25s' numba retrieval kernel (what
`bm25s.BM25.retrieve(..., backend="numba")` runs) re-ranked to the same contract; it is kept so
`bench/retrieval.py` measures both in one run. bm25s' heap keeps an arbitrary subset of the
passages tied at its cut-off, so asking it for a few more than k is not enough where ties are
common: on the generated 100k corpus 31%, 29% and 24% of the queries still had the 10th score
tied at bm25s' 18th, 74th and 2,058th place, and must be answered again exactly. In the same
bench run (1,000 queries, 2 cores, load average 6 -> 4) ours answered 4,010 q/s batched on
2 threads and 2,929 q/s one query per call; bm25s held to the same contract 3,195 and 2,385.
bm25s' bare `retrieve` was faster (4,894 q/s float64, 10,595 float32, batched) but ranked only
14 of the 1,000 rows as rank_bm25 does. Both read every posting of every query term; the default path,
`rollout.retrieval.bm25_pruned`, skips the passages that cannot enter the top k and answers the same.
`SEARCH_PATH` names the path queries take.

The kernels are compiled with `cache=True`, and `PostingsIndex.warm_up` runs them on the
index's own arrays, so an index that reports itself loaded answers its first query without
compiling: numba compiles one machine-code version per argument type (read-only memory-mapped
arrays are a type of their own), and a warm-up on stand-in arrays would compile the wrong one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence

import numpy as np

from rollout.retrieval.bm25_pruned import BLOCK, MARGIN, ScoreBounds, pruned_kernel
from rollout.retrieval.numba_cache import use_project_numba_cache


SEARCH_PATH = "pruned"
"""Which kernel answers queries: "pruned" (ours with dynamic pruning, `retriever.sparse.pruning=on`), "postings"
(ours, every posting: `pruning=off`) or "bm25s" (bm25s' retrieval); see the module docstring."""
_EXTRA = 8
"""How many more than k bm25s is asked for: room for the passages tied at the k-th score."""
_FLOAT = np.dtype(np.float64)
_INT = np.dtype(np.int32)
"""bm25s' kernel returns int32 rows (it caps corpora at 2**31 passages)."""


@functools.cache
def retrieve_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """bm25s' numba retrieval kernel, compiled once per process from the on-disk cache.

    The Python function `bm25s.BM25.retrieve(..., backend="numba", n_threads=1)` compiles,
    wrapped in a dispatcher of our own: bm25s' own compiles it in every new process (7-9 s
    here), ours caches the machine code on disk. The serial, GIL-free variant, so search
    threads run side by side as they do with our kernel.
    """
    import numba
    from bm25s.numba import retrieve_utils

    use_project_numba_cache()
    return numba.njit(cache=True, nogil=True)(retrieve_utils._retrieve_internal_jitted)


@functools.cache
def postings_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """`top_k_postings`, compiled by numba once and cached on disk for later processes.

    A batch of queries in one call, each costing two passes over the postings of its terms and
    nothing the size of the corpus. It releases the GIL, so searches from several threads use
    several cores.
    """
    import numba

    use_project_numba_cache()

    @numba.njit(cache=True, nogil=True)
    def top_k_postings(
        terms: np.ndarray, pointers: np.ndarray, indptr: np.ndarray, doc_ids: np.ndarray, data: np.ndarray,
        scores: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows and scores of each query (terms[pointers[q]:pointers[q + 1]]).

        Best first, ties to the lower row, only passages scoring above 0; -1 and -inf pad.
        `scores` has one slot per passage, all zero on entry; it is left all zero.
        """
        n = len(pointers) - 1
        out_rows = np.full((n, k), -1, dtype=np.int64)
        out_scores = np.full((n, k), -np.inf, dtype=np.float64)
        best = np.zeros(k, dtype=np.float64)  # ascending; best[0] is the k-th best so far
        for q in range(n):
            # Pass 1: postings term after term from 0.0, so a passage's sum adds terms in query
            # order as rank_bm25 does.
            size = 0
            for t in range(pointers[q], pointers[q + 1]):
                term = terms[t]
                for j in range(indptr[term], indptr[term + 1]):
                    scores[doc_ids[j]] += data[j]
                size += indptr[term + 1] - indptr[term]
            # Pass 2: read each passage's sum once (zeroing it marks it read and cleans up), keep
            # a running top k, and keep every passage that reaches the running k-th best so far.
            best[:] = 0.0
            rows = np.empty(size, dtype=np.int64)
            found = np.empty(size, dtype=np.float64)
            m = 0
            for t in range(pointers[q], pointers[q + 1]):
                term = terms[t]
                for j in range(indptr[term], indptr[term + 1]):
                    row = doc_ids[j]
                    score = scores[row]
                    if score == 0.0:
                        continue
                    scores[row] = 0.0
                    if score > 0.0 and score >= best[0]:
                        rows[m] = row
                        found[m] = score
                        m += 1
                        if score > best[0]:
                            i = 0
                            while i + 1 < k and best[i + 1] < score:
                                best[i] = best[i + 1]
                                i += 1
                            best[i] = score
            kept = 0
            for i in range(m):
                if found[i] >= best[0]:
                    rows[kept] = rows[i]
                    found[kept] = found[i]
                    kept += 1
            # Rank by row, then stably by score: best first, ties to the lower row. All of
            # the passages tied at the k-th score are here, so the lowest rows among them win.
            by_row = np.argsort(rows[:kept])
            rows, found = rows[:kept][by_row], found[:kept][by_row]
            by_score = np.argsort(-found, kind="mergesort")
            for i in range(min(k, kept)):
                out_rows[q, i] = rows[by_score[i]]
                out_scores[q, i] = found[by_score[i]]
        return out_rows, out_scores

    return top_k_postings


class PostingsIndex:
    """bm25s' score matrix in CSC form: column t holds the rows and scores of term t's postings."""

    def __init__(self, data: np.ndarray, doc_ids: np.ndarray, indptr: np.ndarray, num_passages: int,
                 bounds: ScoreBounds | None = None, path: str = SEARCH_PATH) -> None:
        # Plain ndarray views of the (memory-mapped) arrays: np.memmap's Python-level indexing
        # hooks cost more than the lookups themselves, and numba types them alike.
        self.data = np.asarray(data)
        self.doc_ids = np.asarray(doc_ids)
        self.indptr = np.asarray(indptr)
        self.num_passages = int(num_passages)
        self.bounds = bounds
        """The score bounds the pruned path needs; without them queries read every posting."""
        self.path = path if bounds is not None or path != "pruned" else "postings"
        # Corpus-sized score arrays, all zero between searches; one per search in flight (the
        # gateway searches from several threads, and the kernel releases the GIL).
        self._free_buffers: list[np.ndarray] = []
        self._buffers_lock = threading.Lock()

    def warm_up(self, path: str | None = None) -> None:
        """Compile (or read from the disk cache) the kernels `path` (by default the index's) runs, for this index's
        array types."""
        path = path or self.path
        term = [np.zeros(1, dtype=np.int64)]  # the build refuses a corpus without terms
        if path == "pruned":
            self.pruned_top_k(term, 1)
            return
        self.postings_top_k(term, 1)  # bm25s' path falls back on it
        if path == "bm25s":
            self.bm25s_top_k(term, 1)

    def top_k(self, queries: Sequence[np.ndarray], take: int) -> tuple[np.ndarray, np.ndarray]:
        """The `take` best rows (int64, -1 pads) and float64 scores (-inf pads) per query of term ids.

        Best first, ties to the lower row, only passages scoring above 0; through the index's `path`.
        """
        if self.path == "bm25s":
            return self.bm25s_top_k(queries, take)
        if self.path == "pruned":
            return self.pruned_top_k(queries, take)
        return self.postings_top_k(queries, take)

    def pruned_top_k(self, queries: Sequence[np.ndarray], take: int) -> tuple[np.ndarray, np.ndarray]:
        """`top_k` through the pruned kernel (`rollout.retrieval.bm25_pruned`): the same answer, fewer postings."""
        if self.bounds is None:
            raise ValueError("the pruned BM25 path needs the index's score bounds")
        terms, pointers = _flat(queries)
        b = self.bounds
        return pruned_kernel()(terms, pointers, self.indptr, self.doc_ids, self.data, np.asarray(b.term_max),
                               np.asarray(b.block_ptr), np.asarray(b.block_last), np.asarray(b.block_max), take,
                               BLOCK, MARGIN)

    def bm25s_top_k(self, queries: Sequence[np.ndarray], take: int) -> tuple[np.ndarray, np.ndarray]:
        """`top_k` through bm25s' kernel, re-ranked so ties go to the lower row.

        bm25s' heap keeps an arbitrary subset of the passages tied at its cut-off, so it is
        asked for a few more than `take`; a query whose `take`-th score is still tied at the
        cut-off may be missing lower rows of that score, and is answered by `postings_top_k`.
        `take` is at most the number of passages.
        """
        rows_out = np.full((len(queries), take), -1, dtype=np.int64)
        scores_out = np.full((len(queries), take), -np.inf, dtype=np.float64)
        if len(queries) == 0:
            return rows_out, scores_out
        fetch = min(take + _EXTRA, self.num_passages)
        pointers = np.zeros(len(queries) + 1, dtype=_INT)
        np.cumsum([len(q) for q in queries], out=pointers[1:])
        flat = np.concatenate(queries).astype(_INT)
        scores, rows = retrieve_kernel()(flat, pointers, fetch, True, _FLOAT, _INT, self.data, self.indptr,
                                         self.doc_ids, self.num_passages, None, None)
        order = np.lexsort((rows, -scores), axis=-1)
        rows, scores = np.take_along_axis(rows, order, -1), np.take_along_axis(scores, order, -1)
        # Every passage scoring above the fetch-th score is in bm25s' answer; one tied with it may not be.
        unsure = np.flatnonzero((scores[:, take - 1] > 0) & (scores[:, -1] == scores[:, take - 1])
                                & (fetch < self.num_passages))
        rows, scores = rows[:, :take], scores[:, :take]
        matched = scores > 0
        rows_out[matched], scores_out[matched] = rows[matched], scores[matched]
        if len(unsure):
            rows_out[unsure], scores_out[unsure] = self.postings_top_k([queries[q] for q in unsure], take)
        return rows_out, scores_out

    def postings_top_k(self, queries: Sequence[np.ndarray], take: int) -> tuple[np.ndarray, np.ndarray]:
        """`top_k` through our postings kernel: one call for the batch, ties resolved inside."""
        terms, pointers = _flat(queries)
        with self._buffers_lock:
            buffer = self._free_buffers.pop() if self._free_buffers else np.zeros(self.num_passages)
        rows, scores = postings_kernel()(terms, pointers, self.indptr, self.doc_ids, self.data, buffer, take)
        # Only a buffer the kernel finished with is all zero again and fit for the next search.
        with self._buffers_lock:
            self._free_buffers.append(buffer)
        return rows, scores




def _flat(queries: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A batch of queries as one int64 array of term ids and the offsets where each query starts."""
    pointers = np.zeros(len(queries) + 1, dtype=np.int64)
    np.cumsum([len(q) for q in queries], out=pointers[1:])
    terms = np.concatenate(queries).astype(np.int64, copy=False) if queries else np.empty(0, dtype=np.int64)
    return terms, pointers
