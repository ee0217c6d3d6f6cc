"""BM25 keyword index with two interchangeable backends that give the same scores.

`bm25s` (the default) precomputes every (term, passage) score into a sparse matrix and
answers a batch of queries with bm25s' own compiled retrieval (see `bm25_kernels`);
`rank_bm25` is the reference implementation, hundreds of times slower on a large corpus. Both
index the tokens of the shared `tokenize` with the same options and score with Okapi BM25 as
rank_bm25's `BM25Okapi(epsilon=0)` defines it:

    score(q, d) = sum over query tokens t of idf(t) * tf(t, d) * (k1 + 1)
                  / (tf(t, d) + k1 * (1 - b + b * len(d) / avg_len))
    idf(t) = max(0, log((N - df(t) + 0.5) / (df(t) + 0.5)))

which is bm25s' `method="atire", idf_method="robertson"`. `retriever.sparse.method=lucene` takes Lucene's idf
instead, log(1 + (N - df(t) + 0.5) / (df(t) + 0.5)), never 0 (bm25s' `idf_method="lucene"`, rank_bm25's Okapi with
that idf), and keeps the tf part above. Ranking happens in float64 with
ties going to the lower row, so both backends return the same passages in the same order.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import bm25s

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import Hits, check_k, empty_hits, read_index_meta
from rollout.retrieval.bm25_build import ChunkTokenizer, build_bm25s_files
from rollout.retrieval.bm25_scorers import SCORERS, Scorer
from rollout.retrieval.params import SparseParams, check_pruning, check_sparse_method
from rollout.retrieval.tokenizer import TOKENIZER_VERSION, tokenize_batch

logger = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("bm25s", "rank_bm25")
"""Values `SparseParams.backend` accepts."""

_FORMAT = "rollout-bm25"
_FORMAT_VERSION = 2
_META = "meta.json"
_QUERIES_PER_THREAD = 8
"""A batch gets a thread per core once each thread has at least this many queries."""


class BM25Retriever:
    """Okapi BM25 over `tokenize(passage.contents)`, scored by the backend `params` name.

    Only passages scoring above 0 are returned: one sharing no word with the query (or only
    words in more than half the corpus, whose robertson idf is 0) is no match, and ranking it would credit
    hit@k and recall for row order. A row therefore holds fewer than k passages, padded with
    `PAD_INDEX` / `PAD_SCORE`, when fewer match; a query of stopwords or unknown words gets none.
    """

    name = "sparse"

    def __init__(self, scorer: Scorer, params: SparseParams) -> None:
        """Use `build` or `load`; this wires an already built backend to its parameters."""
        self._scorer = scorer
        self._params = params

    @classmethod
    def build(cls, passages: Sequence[Passage], params: SparseParams = SparseParams()) -> BM25Retriever:
        """Tokenize title and text of every passage and index them with `params.backend`."""
        params = _checked(params)
        if len(passages) == 0:
            raise RetrievalError("cannot build a BM25 index over an empty corpus; pass at least one passage")
        corpus = tokenize_batch((p.contents for p in passages), stopwords=params.stopwords, stemming=params.stemming)
        if not any(corpus):
            raise RetrievalError(
                "every passage tokenized to nothing (only stopwords or punctuation); "
                "check that the corpus passages carry text"
            )
        scorer = SCORERS[params.backend].build(corpus, params)
        logger.debug("built %s BM25 index over %d passages", params.backend, len(passages))
        return cls(scorer, params)

    @classmethod
    def build_into(cls, passages: Sequence[Passage], path: Path, params: SparseParams = SparseParams(), *,
                   workers: int | None = None, tokenizer: ChunkTokenizer | None = None) -> BM25Retriever:
        """`build` then `save` into directory `path`, then `load`: for bm25s, streamed in bounded memory
        (`params.build_memory_mb`) with the tokenizing on `workers` processes (default: every core) or by
        `tokenizer` (e.g. on Ray), the same files and scores as `build`; for rank_bm25, `build` and `save`."""
        params = _checked(params)
        if params.backend != "bm25s":
            retriever = cls.build(passages, params)
            retriever.save(path)
            return retriever
        if len(passages) == 0:
            raise RetrievalError("cannot build a BM25 index over an empty corpus; pass at least one passage")
        terms = build_bm25s_files(passages, params, Path(path), workers=workers, tokenizer=tokenizer)
        if terms == 0:
            raise RetrievalError(
                "every passage tokenized to nothing (only stopwords or punctuation); "
                "check that the corpus passages carry text"
            )
        cls._write_meta(Path(path), params, len(passages))
        return cls.load(path, params)

    @property
    def num_passages(self) -> int:
        return self._scorer.num_passages

    @property
    def params(self) -> SparseParams:
        return self._params

    @staticmethod
    def cache_params(params: SparseParams) -> dict[str, Any]:
        """Everything that changes the stored index, for a cache key."""
        return {**_index_shape(_checked(params)), "tokenizer_version": TOKENIZER_VERSION,
                "format_version": _FORMAT_VERSION}

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """The k best passages per query, best first; ties go to the lower row.

        The batch is tokenized in one pass, then answered by one call of bm25s' compiled
        retrieval (a large batch is shared among a thread per core), or one rank_bm25
        `get_scores` call per query.
        """
        check_k(k)
        if isinstance(queries, str):
            raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
        tokens = tokenize_batch(queries, stopwords=self._params.stopwords, stemming=self._params.stemming)
        hits = empty_hits(len(tokens), k)
        take = min(k, self.num_passages)

        def rank(rows: slice) -> None:
            found, scores = self._scorer.top_k(tokens[rows], take)
            hits.indices[rows, :take] = found
            hits.scores[rows, :take] = scores

        threads = min(os.cpu_count() or 1, len(tokens) // _QUERIES_PER_THREAD) if self._scorer.parallel else 1
        if threads <= 1:
            rank(slice(0, len(tokens)))
        else:
            # One contiguous share per thread: one kernel call each, and the kernel releases the GIL.
            bounds = [len(tokens) * i // threads for i in range(threads + 1)]
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(rank, (slice(a, b) for a, b in itertools.pairwise(bounds))))
        return hits

    def save(self, path: Path) -> None:
        """Write the index into directory `path` (no pickle); meta.json names backend and params."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._scorer.save(path)
        self._write_meta(path, self._params, self.num_passages)

    @staticmethod
    def _write_meta(path: Path, params: SparseParams, num_passages: int) -> None:
        meta = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "tokenizer_version": TOKENIZER_VERSION,
            "params": asdict(params),
            "num_passages": num_passages,
            "bm25s_version": bm25s.__version__,
        }
        # Written last: a directory with meta.json holds a complete index.
        (path / _META).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path, params: SparseParams | None = None) -> BM25Retriever:
        """Open a directory written by `save`; the backend and parameters come from its meta.json.

        `params`, when given, must equal the saved ones (they shape the stored index). bm25s
        indexes are memory-mapped, so loading is quick whatever the corpus size.
        """
        path = Path(path)
        saved, num_passages = _read_meta(path)
        if params is not None:
            # How queries are answered is the caller's to choose; what the index holds is the saved files'.
            saved = replace(saved, pruning=_checked(params).pruning)
        if params is not None and _index_shape(_checked(params)) != _index_shape(saved):
            raise RetrievalError(
                f"BM25 index at {path} was built with {saved}, not {params}; "
                "load it with params=None, or delete the directory and rebuild it with the new parameters"
            )
        scorer = SCORERS[saved.backend].load(path, saved)
        if scorer.num_passages != num_passages:
            raise RetrievalError(
                f"BM25 index at {path} holds {scorer.num_passages} passages, its meta.json says {num_passages}; "
                "delete the directory and rebuild the index"
            )
        logger.debug("loaded %s BM25 index (%d passages) from %s", saved.backend, scorer.num_passages, path)
        return cls(scorer, saved)


_NOT_IN_INDEX = ("index_path", "build_memory_mb", "pruning")
"""Settings that shape no stored BM25 index: left out of its cache key, so caches built before they existed hold."""


def _index_shape(params: SparseParams) -> dict[str, Any]:
    """The settings a stored index was built with (backend, k1, b, idf method, tokenizing)."""
    shape = {k: v for k, v in asdict(params).items() if k not in _NOT_IN_INDEX}
    if shape["method"] == "robertson":  # only when not the first idf: keys of indexes built before it stay valid
        del shape["method"]
    return shape


def _checked(params: SparseParams) -> SparseParams:
    """`params` with plain float/bool values, or an error naming the valid values."""
    if params.backend not in BACKENDS:
        raise RetrievalError(
            f"unknown BM25 backend {params.backend!r}; set retriever.sparse.backend to one of {list(BACKENDS)}"
        )
    memory = params.build_memory_mb
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 64:
        raise RetrievalError(f"retriever.sparse.build_memory_mb={memory!r}: give the megabytes a BM25 build may hold, "
                             "at least 64 (default 2048)")
    check_pruning(params.pruning)
    if params.k1 < 0 or not 0.0 <= params.b <= 1.0:
        raise RetrievalError(
            f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={params.k1}, b={params.b}; the usual values are 1.5 and 0.75"
        )
    check_sparse_method(params.method)
    return SparseParams(
        backend=params.backend,
        k1=float(params.k1),
        b=float(params.b),
        method=params.method,
        stopwords=bool(params.stopwords),
        stemming=bool(params.stemming),
        index_path=params.index_path,
        build_memory_mb=memory,
        pruning=params.pruning,
    )


def _read_meta(path: Path) -> tuple[SparseParams, int]:
    """The parameters and passage count a saved index records; errors say to rebuild."""
    meta = read_index_meta(path, _META, fmt=_FORMAT, version=_FORMAT_VERSION, what="BM25 index",
                           builder="BM25Retriever.build")
    if meta.get("tokenizer_version") != TOKENIZER_VERSION:
        raise RetrievalError(
            f"BM25 index at {path} was tokenized with tokenizer v{meta.get('tokenizer_version')}, queries now use "
            f"v{TOKENIZER_VERSION}; delete the directory and rebuild the index"
        )
    try:
        return _checked(SparseParams(**meta["params"])), int(meta["num_passages"])
    except (KeyError, TypeError, ValueError) as e:
        raise RetrievalError(
            f"{path / _META} has no valid params ({e}); delete the directory and rebuild the index"
        ) from e
