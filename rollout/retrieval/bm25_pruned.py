"""BM25 top k with dynamic pruning (block-max MaxScore) over the postings of bm25s' score matrix.

The exhaustive kernel (`bm25_kernels.postings_kernel`) adds up every posting of every query term, so its cost grows
with the corpus: a word in a tenth of 5M passages is 500,000 postings a query. Lucene keeps its speed by skipping
passages that cannot enter the top k; this kernel does the same, document at a time:

- Each term's postings ascend by passage, and every posting already holds its final score (bm25s precomputes
  them), so a term's **upper bound** is the largest of its scores, and a block of `BLOCK` consecutive postings
  has its own (`ScoreBounds`).
- A term whose every posting scores 0 (robertson's idf of a word in over half the passages) is left out: it adds
  exactly 0.0 to any sum, and its postings are the longest there are.
- Query terms are ordered by bound. While the k-th best score so far (the threshold) exceeds the summed bounds
  of the weakest terms, those terms are **non-essential**: a passage holding none of the others cannot enter, so
  only the essential terms' postings are walked (MaxScore). A candidate whose essential scores plus the
  non-essential terms' **block** bounds cannot beat the threshold is skipped before any of those postings is read;
  the others are looked up by binary search within the one block that may hold them.
- Passages are taken in **windows** that end where an essential term's current block ends. When the block bounds of
  every term over a window cannot beat the threshold, the whole window is skipped without reading a score (block-max
  MaxScore, as Lucene's): where a word's few best postings (a higher term frequency, a shorter passage) set the
  threshold, the blocks without one are passed over.
- A surviving candidate's score is summed over the query's terms in query order from 0.0, exactly as the
  exhaustive kernel sums it, so scores agree to the last bit. Passages are met in ascending order, so a later one
  tied with the k-th score never displaces an earlier one: ties go to the lower row, as everywhere.

Bounds are compared with a small relative margin: a sum of bounds taken in another order may round below a
passage's own sum, and a bound must never prune a passage that would enter. The results are those of the
exhaustive kernel, ids and scores (tests/retrieval/test_bm25_pruned.py checks random corpora and queries).

The bounds are written beside the index (`bounds.*.npy`, with the stamps of the arrays they were computed from);
an index without them, or whose arrays changed, gets them computed once in a pass over its postings.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rollout.retrieval.numba_cache import use_project_numba_cache

logger = logging.getLogger(__name__)

BLOCK = 128
"""Postings a block bound covers: Lucene's block size. Bounds take 12 bytes a block, 0.1 bytes a posting."""
MARGIN = 1e-9
"""Relative slack on every bound (see the module docstring); pruning a little less never changes a result."""
SCORE_MATRIX_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
"""The files of bm25s' score matrix (`bm25s.BM25.save`) the bounds are computed from."""
_FILES = ("term_max", "block_ptr", "block_last", "block_max")
_STAMPS = "bounds.json"


@dataclass(frozen=True)
class ScoreBounds:
    """Upper bounds of a score matrix's postings: per term, and per block of `BLOCK` postings of a term."""

    term_max: np.ndarray
    """float64, per term: its highest score (0.0 for a term without postings)."""
    block_ptr: np.ndarray
    """int64, terms + 1: term t's blocks are block_ptr[t] .. block_ptr[t + 1] - 1."""
    block_last: np.ndarray
    """int32, per block: the last (highest) passage it holds."""
    block_max: np.ndarray
    """float64, per block: its highest score."""


@functools.cache
def _bounds_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    import numba

    use_project_numba_cache()

    @numba.njit(cache=True, nogil=True)
    def bounds_of(indptr: np.ndarray, doc_ids: np.ndarray, data: np.ndarray, block: int) -> tuple[
            np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n_terms = len(indptr) - 1
        block_ptr = np.zeros(n_terms + 1, dtype=np.int64)
        for t in range(n_terms):
            block_ptr[t + 1] = block_ptr[t] + (indptr[t + 1] - indptr[t] + block - 1) // block
        term_max = np.zeros(n_terms, dtype=np.float64)
        block_last = np.empty(block_ptr[-1], dtype=np.int32)
        block_max = np.empty(block_ptr[-1], dtype=np.float64)
        for t in range(n_terms):
            best_of_term = 0.0
            for b in range(block_ptr[t], block_ptr[t + 1]):
                start = indptr[t] + (b - block_ptr[t]) * block
                stop = min(start + block, indptr[t + 1])
                best = data[start]
                for j in range(start + 1, stop):
                    if data[j] > best:
                        best = data[j]
                block_max[b] = best
                block_last[b] = doc_ids[stop - 1]
                if best > best_of_term:
                    best_of_term = best
            term_max[t] = best_of_term
        return term_max, block_ptr, block_last, block_max

    return bounds_of


def compute_bounds(indptr: np.ndarray, doc_ids: np.ndarray, data: np.ndarray) -> ScoreBounds:
    """The bounds of a score matrix, in one sequential pass over its postings (memory-mapped arrays stay so)."""
    return ScoreBounds(*_bounds_kernel()(np.asarray(indptr), np.asarray(doc_ids), np.asarray(data), BLOCK))


def _stamps(path: Path) -> dict[str, list[int]]:
    stamps = {}
    for name in SCORE_MATRIX_FILES:
        st = (path / name).stat()
        stamps[name] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return stamps


def write_bounds(path: Path, bounds: ScoreBounds) -> None:
    """Save `bounds` beside the score matrix in `path`, stamped with its arrays' sizes and times."""
    for name in _FILES:
        np.save(path / f"bounds.{name}.npy", getattr(bounds, name), allow_pickle=False)
    (path / _STAMPS).write_text(json.dumps({"block": BLOCK, "arrays": _stamps(path)}), encoding="utf-8")


def load_bounds(path: Path, indptr: np.ndarray, doc_ids: np.ndarray, data: np.ndarray) -> ScoreBounds:
    """The bounds saved beside the index in `path` (memory-mapped), else computed now and saved when the folder
    is writable (a read-only cache keeps them in memory and computes them again at the next load)."""
    try:
        stamps = json.loads((path / _STAMPS).read_text(encoding="utf-8"))
        if stamps == {"block": BLOCK, "arrays": _stamps(path)}:
            bounds = ScoreBounds(*(np.load(path / f"bounds.{name}.npy", mmap_mode="r", allow_pickle=False)
                                   for name in _FILES))
            if len(bounds.block_ptr) == len(indptr) and len(bounds.term_max) == len(indptr) - 1:
                return bounds
    except (OSError, ValueError):
        pass
    bounds = compute_bounds(indptr, doc_ids, data)
    if os.access(path, os.W_OK):
        write_bounds(path, bounds)
        logger.debug("wrote the BM25 score bounds of %s (%d blocks)", path, len(bounds.block_max))
    for array in (bounds.term_max, bounds.block_ptr, bounds.block_last, bounds.block_max):
        # Read-only, as the saved ones are mapped: numba compiles one kernel per array type, and the first load
        # after a build must use the kernel every later load finds in the disk cache.
        array.flags.writeable = False
    return bounds


@functools.cache
def pruned_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """`top_k_pruned`, compiled by numba once and cached on disk for later processes; it releases the GIL."""
    import numba

    use_project_numba_cache()

    @numba.njit(cache=True, nogil=True)
    def top_k_pruned(
        terms: np.ndarray, pointers: np.ndarray, indptr: np.ndarray, doc_ids: np.ndarray, data: np.ndarray,
        term_max: np.ndarray, block_ptr: np.ndarray, block_last: np.ndarray, block_max: np.ndarray, k: int,
        block: int, margin: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows and scores of each query (terms[pointers[q]:pointers[q + 1]]), as the exhaustive kernel
        answers them: best first, ties to the lower row, only passages scoring above 0; -1 and -inf pad."""
        n = len(pointers) - 1
        out_rows = np.full((n, k), -1, dtype=np.int64)
        out_scores = np.full((n, k), -np.inf, dtype=np.float64)
        heap_scores = np.empty(k, dtype=np.float64)
        heap_rows = np.empty(k, dtype=np.int64)
        no_doc = np.iinfo(np.int64).max
        for q in range(n):
            # One cursor per query position (a repeated word counts twice, as in the exhaustive sum), for the
            # terms that can score: a term whose every posting scores 0 (robertson's idf of a word in over half
            # the passages) adds exactly 0.0 to a sum, so leaving it out changes no score and skips its postings.
            query = terms[pointers[q]:pointers[q + 1]]
            query = query[term_max[query] > 0.0]
            m = len(query)
            if m == 0:
                continue
            pos = np.empty(m, dtype=np.int64)
            end = np.empty(m, dtype=np.int64)
            blk = np.empty(m, dtype=np.int64)  # the block of each cursor's next candidate (non-essential terms)
            bound = np.empty(m, dtype=np.float64)
            for i in range(m):
                term = query[i]
                pos[i] = indptr[term]
                end[i] = indptr[term + 1]
                blk[i] = block_ptr[term]
                bound[i] = term_max[term] * (1.0 + margin)
            order = np.argsort(bound, kind="mergesort")  # weakest first
            # below[e]: the summed bounds of the e weakest terms (what a passage holding none of the rest may reach)
            below = np.zeros(m + 1, dtype=np.float64)
            for e in range(m):
                below[e + 1] = (below[e] + bound[order[e]]) * (1.0 + margin)
            size = 0
            threshold = 0.0  # a passage must score above this to enter: 0, then the k-th best once k are held
            essential = 0  # order[essential:] are the terms whose postings are walked
            while essential < m and below[essential + 1] <= threshold:
                essential += 1
            window_end = -1  # the last passage of the window whose bound was last taken
            while essential < m:
                # The next candidate: the lowest passage among the essential terms' cursors.
                doc = no_doc
                for e in range(essential, m):
                    i = order[e]
                    if pos[i] < end[i] and doc_ids[pos[i]] < doc:
                        doc = doc_ids[pos[i]]
                if doc == no_doc:
                    break
                if doc > window_end:
                    # A new window: up to the first end of an essential term's current block. Within it, each term
                    # scores at most its block bound there; when their sum cannot beat the threshold, every
                    # essential cursor moves past the window without a passage of it being scored.
                    window_end = no_doc
                    for e in range(essential, m):
                        i = order[e]
                        if pos[i] < end[i]:
                            term = query[i]
                            b = block_ptr[term] + (pos[i] - indptr[term]) // block
                            if block_last[b] < window_end:
                                window_end = block_last[b]
                    window_reach = 0.0
                    for e in range(m):
                        i = order[e]
                        term = query[i]
                        last_block = block_ptr[term + 1]
                        if e >= essential:
                            if pos[i] < end[i]:
                                window_reach += block_max[block_ptr[term] + (pos[i] - indptr[term]) // block]
                            continue
                        while blk[i] < last_block and block_last[blk[i]] < doc:
                            blk[i] += 1
                        b = blk[i]
                        best = 0.0
                        while b < last_block:
                            if block_max[b] > best:
                                best = block_max[b]
                            if block_last[b] >= window_end:
                                break
                            b += 1
                        window_reach += best
                    if window_reach * (1.0 + margin) <= threshold:
                        for e in range(essential, m):
                            i = order[e]
                            term = query[i]
                            lo = pos[i]
                            hi = min(indptr[term] + ((pos[i] - indptr[term]) // block + 1) * block, end[i])
                            while lo < hi:  # the first posting past the window, in the current block or just after
                                mid = (lo + hi) // 2
                                if doc_ids[mid] <= window_end:
                                    lo = mid + 1
                                else:
                                    hi = mid
                            pos[i] = lo
                        continue
                # Its essential scores are at hand; the non-essential terms add at most their block bounds.
                reach = 0.0
                for e in range(essential, m):
                    i = order[e]
                    if pos[i] < end[i] and doc_ids[pos[i]] == doc:
                        reach += data[pos[i]]
                reach = reach * (1.0 + margin) + below[essential]
                if reach > threshold:
                    reach -= below[essential]
                    for e in range(essential - 1, -1, -1):
                        i = order[e]
                        term = query[i]
                        last_block = block_ptr[term + 1]
                        while blk[i] < last_block and block_last[blk[i]] < doc:
                            blk[i] += 1
                        if blk[i] < last_block:
                            reach += block_max[blk[i]]
                    reach *= 1.0 + margin
                if reach > threshold:
                    # The exact score, summed in query order from 0.0 as the exhaustive kernel sums it.
                    score = 0.0
                    for i in range(m):
                        term = query[i]
                        if pos[i] < end[i] and doc_ids[pos[i]] < doc:
                            # A non-essential cursor: binary search in the block that may hold `doc`.
                            while blk[i] < block_ptr[term + 1] and block_last[blk[i]] < doc:
                                blk[i] += 1
                            if blk[i] == block_ptr[term + 1]:
                                pos[i] = end[i]
                                continue
                            lo = max(pos[i], indptr[term] + (blk[i] - block_ptr[term]) * block)
                            hi = min(lo + block, end[i])
                            while lo < hi:
                                mid = (lo + hi) // 2
                                if doc_ids[mid] < doc:
                                    lo = mid + 1
                                else:
                                    hi = mid
                            pos[i] = lo
                        if pos[i] < end[i] and doc_ids[pos[i]] == doc:
                            score += data[pos[i]]
                    # A min-heap of the hits held, the worst (lowest score, then highest row) at its root; helpers
                    # are written out here, as numba caches a kernel on disk only when it calls no closure.
                    if score > 0.0 and (size < k or score > heap_scores[0]):
                        if size < k:  # sift up from the end
                            i = size
                            size += 1
                            while i > 0:
                                parent = (i - 1) // 2
                                if not (score < heap_scores[parent]
                                        or (score == heap_scores[parent] and doc > heap_rows[parent])):
                                    break
                                heap_scores[i] = heap_scores[parent]
                                heap_rows[i] = heap_rows[parent]
                                i = parent
                        else:  # replace the root, sift down
                            i = 0
                            while True:
                                low = -1
                                low_score, low_row = score, doc
                                for child in (2 * i + 1, 2 * i + 2):
                                    if child < size and (heap_scores[child] < low_score or (
                                            heap_scores[child] == low_score and heap_rows[child] > low_row)):
                                        low, low_score, low_row = child, heap_scores[child], heap_rows[child]
                                if low < 0:
                                    break
                                heap_scores[i] = low_score
                                heap_rows[i] = low_row
                                i = low
                        heap_scores[i] = score
                        heap_rows[i] = doc
                        if size == k and heap_scores[0] > threshold:
                            threshold = heap_scores[0]
                            while essential < m and below[essential + 1] <= threshold:
                                essential += 1
                # Move the essential cursors past `doc`.
                for e in range(essential, m):
                    i = order[e]
                    if pos[i] < end[i] and doc_ids[pos[i]] == doc:
                        pos[i] += 1
            # Best first, ties to the lower row: by row, then stably by score.
            by_row = np.argsort(heap_rows[:size])
            rows, found = heap_rows[:size][by_row], heap_scores[:size][by_row]
            by_score = np.argsort(-found, kind="mergesort")
            for r in range(size):
                out_rows[q, r] = rows[by_score[r]]
                out_scores[q, r] = found[by_score[r]]
        return out_rows, out_scores

    return top_k_pruned
