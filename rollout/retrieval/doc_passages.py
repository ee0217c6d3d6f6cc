"""A dense index over passages of long documents that ranks the documents: passages as views, a row by its best.

BrowseComp-Plus' documents run to thousands of words, and an encoder reads a few hundred tokens (the bundled
all-MiniLM-L6-v2: 256): one vector per document would see its beginning only. With `retriever.dense.passage_tokens`
set, each corpus row longer than that many whitespace tokens is cut into passages of that many tokens (consecutive
ones sharing `passage_overlap`), every passage is encoded, and a query ranks the rows by their best passage's score
(MaxP). The index's answers are rows of the corpus, as every other index's are, so every tool, `POST /retrieve` and
`eval-retrieval` ranks documents with it unchanged.

The passages are views, not copies: the corpus (the corpus store) keeps each document whole, and a passage is its
row and the character span of its tokens, the exact slice of the row's text (line breaks within it kept), as
`rollout.data.chunking` cuts a chunk. So the document a tool returns is its original text, never overlapping
chunks joined again. The spans are computed once per corpus and settings (three int64 per passage) and cached
beside the indexes as `passages-<key>/`; the view's fingerprint names the dense index's cache entry.

A row of at most `passage_tokens` tokens is one passage with the row's own id; a longer row's passages are
`<row id>#<i>`, with `doc_id` the row's document, as `chunk_tokens` names its chunks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np

from rollout.cache_folder import temp_prefix
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import PAD_INDEX, Hits, Retriever, check_k, empty_hits, query_list

logger = logging.getLogger(__name__)

VIEW_VERSION = 1
"""Bump when the spans computed for the same corpus and settings change: cached views are then recomputed."""
_META = "meta.json"
_ARRAYS = ("rows", "starts", "ends")
MIN_DEPTH = 32
"""Passages a document search looks at first, at least (more when k is larger; deeper until k rows are found)."""


@functools.cache
def _whitespace() -> np.ndarray:
    """The code points `str.split()` splits at (`str.isspace`): the tokens are the ones `chunking` counts. Found on
    first use (a scan of every code point, 0.2 s), not when the module is imported."""
    return np.array([c for c in range(0x110000) if chr(c).isspace()], dtype=np.uint32)


def token_spans(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) character offsets of the whitespace-separated tokens of `text`, as `text.split()` splits it."""
    if not text:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    word = ~np.isin(codes, _whitespace())
    edges = np.diff(np.concatenate(([False], word, [False])).astype(np.int8))
    return np.flatnonzero(edges == 1).astype(np.int64), np.flatnonzero(edges == -1).astype(np.int64)


def passage_spans(text: str, tokens: int, overlap: int) -> list[tuple[int, int]]:
    """The character spans of a text's passages: windows of `tokens` tokens, each starting `tokens - overlap` tokens
    after the last, the last ending at the text's last token; one span, the whole text, when it is not longer."""
    starts, ends = token_spans(text)
    n = len(starts)
    if n <= tokens:
        return [(0, len(text))]
    spans = []
    for first in range(0, n, tokens - overlap):
        last = min(first + tokens, n)
        spans.append((int(starts[first]), int(ends[last - 1])))
        if last == n:
            break
    return spans


class PassageView(Sequence[Passage]):
    """The passages of a corpus' rows (see the module docstring): `view[i]` is a `Passage` sliced from its row."""

    def __init__(self, rows: Sequence[Passage], spans: dict[str, np.ndarray], fingerprint: str,
                 tokens: int) -> None:
        self.rows = rows
        """The corpus the passages are cut from (a corpus store, or a list)."""
        self.row_of = spans["rows"]
        """int64 per passage: its row in `rows`, ascending."""
        self._starts, self._ends = spans["starts"], spans["ends"]
        self._first = np.searchsorted(self.row_of, np.arange(len(rows) + 1), "left")
        """The first passage of each row (and the passage count last): a passage's index within its row."""
        self.fingerprint = fingerprint
        """Names the view's content for the index cache: the corpus' fingerprint and the cut settings."""
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.row_of)

    @overload
    def __getitem__(self, i: int) -> Passage: ...
    @overload
    def __getitem__(self, i: slice) -> list[Passage]: ...

    def __getitem__(self, i: int | slice) -> Passage | list[Passage]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"passage {i} out of range for a view of {n}")
        i = int(i) % n
        row = int(self.row_of[i])
        return self._passage(self.rows[row], row, i)

    def __iter__(self) -> Iterator[Passage]:
        """Every passage in order, each row read once (an index build reads them all)."""
        i, n = 0, len(self)
        row_of = self.row_of.tolist()
        for row, doc in enumerate(self.rows):
            while i < n and row_of[i] == row:
                yield self._passage(doc, row, i)
                i += 1

    def _passage(self, doc: Passage, row: int, i: int) -> Passage:
        first, after = int(self._first[row]), int(self._first[row + 1])
        if after - first == 1 and int(self._starts[i]) == 0 and int(self._ends[i]) == len(doc.text):
            return doc  # a row not cut: itself
        text = doc.text[int(self._starts[i]):int(self._ends[i])]
        return Passage(f"{doc.id}#{i - first}", doc.title, text, doc_id=doc.source_id)

    def contents(self, start: int, stop: int) -> list[str]:
        """`Passage.contents` of passages start..stop-1 (what an encoder reads)."""
        return [p.contents for p in self[start:stop]]


def view_key(rows_fingerprint: str, tokens: int, overlap: int) -> str:
    """sha256 naming a view: the corpus, the cut settings and `VIEW_VERSION`."""
    payload = json.dumps({"corpus": rows_fingerprint, "tokens": tokens, "overlap": overlap, "version": VIEW_VERSION},
                         sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def passage_view(rows: Sequence[Passage], rows_fingerprint: str, cache_dir: Path, tokens: int,
                 overlap: int = 0) -> PassageView:
    """The view of `rows` cut into passages of `tokens` tokens, its spans read from `cache_dir` or computed once
    (one pass over the corpus) and cached there. `rows_fingerprint` names the rows' content (the index cache's
    `corpus_fingerprint`)."""
    if len(rows) == 0:
        raise RetrievalError("the corpus is empty; there are no passages to cut")
    key = view_key(rows_fingerprint, tokens, overlap)
    final = Path(cache_dir) / f"passages-{key[:16]}"
    spans = _load(final, len(rows))
    if spans is None:
        logger.info("cutting %d documents into passages of %d words for the dense index", len(rows), tokens)
        spans = _compute(rows, tokens, overlap)
        _save(spans, final, len(rows))
        logger.info("%d documents give %d passages, cached at %s", len(rows), len(spans["rows"]), final)
    return PassageView(rows, spans, key, tokens)


def _compute(rows: Sequence[Passage], tokens: int, overlap: int) -> dict[str, np.ndarray]:
    row_of: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for row, doc in enumerate(rows):
        for start, end in passage_spans(doc.text, tokens, overlap):
            row_of.append(row)
            starts.append(start)
            ends.append(end)
    return {"rows": np.array(row_of, dtype=np.int64), "starts": np.array(starts, dtype=np.int64),
            "ends": np.array(ends, dtype=np.int64)}


def _load(final: Path, n_rows: int) -> dict[str, np.ndarray] | None:
    """The cached spans, or None when there are none (or they are unreadable: computed again)."""
    if not (final / _META).is_file():
        return None
    try:
        meta = json.loads((final / _META).read_text(encoding="utf-8"))
        # Mapped, not read: a search reads a few entries of `rows`; `starts`, `ends` serve an index build.
        spans = {name: np.load(final / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in _ARRAYS}
        if meta.get("rows") != n_rows or len({len(a) for a in spans.values()}) != 1:
            raise ValueError(f"it was cut from {meta.get('rows')} rows, the corpus has {n_rows}")
    except (OSError, ValueError) as e:
        logger.warning("cached passages at %s are unusable (%s); cutting them again", final, e)
        shutil.rmtree(final, ignore_errors=True)
        return None
    return spans


def _save(spans: dict[str, np.ndarray], final: Path, n_rows: int) -> None:
    """Written aside and renamed: a reader sees all of it or none; a concurrent writer's copy is as good."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(final.name), dir=final.parent))
    try:
        for name in _ARRAYS:
            np.save(tmp / f"{name}.npy", spans[name], allow_pickle=False)
        (tmp / _META).write_text(json.dumps({"rows": n_rows, "passages": len(spans["rows"]),
                                             "version": VIEW_VERSION}), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / _META).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BestPassageRetriever:
    """A passage index that answers with corpus rows: each row scored by its best passage (MaxP), best first.

    `search` looks at the `max(MIN_DEPTH, 4k)` best passages and, for a query whose passages there cover fewer than
    k rows, again four times deeper, until k rows are found or every passage was looked at."""

    name = "dense"

    def __init__(self, passages: Retriever, view: PassageView) -> None:
        self.passages = passages
        """The index of the view's passages (row i = passage i of the view)."""
        self.view = view

    @property
    def num_passages(self) -> int:
        """Rows of the corpus this retriever ranks (what the other indexes of the corpus count)."""
        return len(self.view.rows)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        check_k(k)
        queries = query_list(queries)
        hits = empty_hits(len(queries), k)
        total = len(self.view)
        depth = min(total, max(MIN_DEPTH, 4 * k))
        pending = list(range(len(queries)))
        while pending:
            found = self.passages.search([queries[q] for q in pending], depth)
            deeper = []
            for j, q in enumerate(pending):
                best = self._best_rows(found.indices[j], found.scores[j], k)
                if len(best) < k and depth < total:
                    deeper.append(q)
                    continue
                for rank, (row, score) in enumerate(best):
                    hits.indices[q, rank], hits.scores[q, rank] = row, score
            pending, depth = deeper, min(total, depth * 4)
        return hits

    def _best_rows(self, passages: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The first k distinct rows of passages ranked best first, each with its first (best) passage's score."""
        best: dict[int, float] = {}
        for passage, score in zip(passages.tolist(), scores.tolist(), strict=True):
            if passage == PAD_INDEX:
                break
            row = int(self.view.row_of[passage])
            if row not in best:
                best[row] = score
                if len(best) == k:
                    break
        return list(best.items())

    def close(self) -> None:
        """Stop the passage index's batching thread, if it has one."""
        close = getattr(self.passages, "close", None)
        if callable(close):
            close()
