"""The seam every index implements: `Retriever.search` returning `Hits`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from rollout.errors import RetrievalError

PAD_INDEX = -1
"""Row number that fills a result row when the corpus holds fewer than k passages."""
PAD_SCORE = np.float32(-np.inf)
"""Score beside a padded row; -inf keeps every row in descending order."""


class Hits(NamedTuple):
    """Ranked results of a batch of queries (one row per query, best first)."""

    indices: np.ndarray
    """int64, shape (n_queries, k): row numbers into the passage list; -1 pads when fewer than k."""
    scores: np.ndarray
    """float32, shape (n_queries, k), descending per row; -inf beside padding."""


class Retriever(Protocol):
    """Anything that ranks the passages of one corpus for text queries."""

    name: str
    """Which kind of retriever this is: "dense", "sparse" or "hybrid"."""

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Return the k best passages for each query."""
        ...


def query_list(queries: Sequence[str]) -> list[str]:
    """The queries of a batch as a list; a bare string (a common slip) is refused rather than searched per letter."""
    if isinstance(queries, str):
        raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
    return list(queries)


def check_k(k: int) -> None:
    """Reject a k that no index can answer."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise RetrievalError(f"k must be a positive integer, got {k!r}; ask for at least one passage")


def empty_hits(n_queries: int, k: int) -> Hits:
    """A result made only of padding, shaped for n_queries rows of k."""
    return Hits(
        indices=np.full((n_queries, k), PAD_INDEX, dtype=np.int64),
        scores=np.full((n_queries, k), PAD_SCORE, dtype=np.float32),
    )


def top_k_hits(scores: np.ndarray, k: int) -> Hits:
    """Select the k highest scores of each row of a (n_queries, n_docs) matrix.

    Ties are broken by the lower row number, so the result is deterministic: argpartition
    alone would pick an arbitrary subset of the passages tied at the k-th score.
    """
    check_k(k)
    if scores.ndim != 2:
        raise RetrievalError(f"scores must be a (n_queries, n_docs) matrix, got shape {scores.shape}")
    n_queries, n_docs = scores.shape
    hits = empty_hits(n_queries, k)
    take = min(k, n_docs)
    if take == 0:
        return hits
    for row, row_scores in enumerate(scores):
        if take < n_docs:
            best = np.argpartition(-row_scores, take - 1)[:take]
            kth = row_scores[best].min()
            # Every passage scoring at least the k-th value is a candidate, ties included.
            candidates = np.flatnonzero(row_scores >= kth)
        else:
            candidates = np.arange(n_docs, dtype=np.int64)
        order = np.lexsort((candidates, -row_scores[candidates]))[:take]
        chosen = candidates[order]
        hits.indices[row, :take] = chosen
        hits.scores[row, :take] = row_scores[chosen]
    return hits


def read_index_meta(path: Path, meta_file: str, *, fmt: str, version: int, what: str, builder: str) -> dict:
    """A saved index's meta.json, after checking it is the on-disk format this code reads."""
    meta_path = Path(path) / meta_file
    if not meta_path.is_file():
        raise RetrievalError(f"no {what} at {path} ({meta_file} missing); build one with {builder}(...).save(path)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RetrievalError(
            f"{meta_path} is not readable JSON ({e}); delete the directory and rebuild the index"
        ) from e
    if not isinstance(meta, dict):
        raise RetrievalError(f"{meta_path} is not a JSON object; delete the directory and rebuild the index")
    if meta.get("format") != fmt or meta.get("format_version") != version:
        raise RetrievalError(
            f"{path} holds format {meta.get('format')!r} v{meta.get('format_version')}, this code reads "
            f"{fmt!r} v{version}; delete the directory and rebuild the index"
        )
    return meta
