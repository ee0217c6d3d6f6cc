"""BM25 keyword index with two interchangeable backends that give the same scores.

`bm25s` (the default) precomputes every (term, passage) score into a sparse matrix and
answers a query with two compiled passes over the postings of its terms; `rank_bm25` is the
reference implementation, hundreds of times slower on a large corpus. Both index the tokens of the
shared `tokenize` with the same options and score with Okapi BM25 as rank_bm25's
`BM25Okapi(epsilon=0)` defines it:

    score(q, d) = sum over query tokens t of idf(t) * tf(t, d) * (k1 + 1)
                  / (tf(t, d) + k1 * (1 - b + b * len(d) / avg_len))
    idf(t) = max(0, log((N - df(t) + 0.5) / (df(t) + 0.5)))

which is bm25s' `method="atire", idf_method="robertson"`. Ranking happens in float64 with
ties going to the lower row, so both backends return the same passages in the same order.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import Hits, check_k, empty_hits, read_index_meta
from rollout.retrieval.params import SparseParams
from rollout.retrieval.tokenizer import TOKENIZER_VERSION, tokenize_batch

logger = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("bm25s", "rank_bm25")
"""Values `SparseParams.backend` accepts."""

_FORMAT = "rollout-bm25"
_FORMAT_VERSION = 2
_META = "meta.json"
_VOCAB = "vocab.json"
_TOKEN_IDS = "token_ids.npy"
_OFFSETS = "offsets.npy"
_BM25S_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json",
                 "params.index.json")
"""The files `bm25s.BM25.save` writes."""
_QUERIES_PER_THREAD = 32
"""A batch gets a thread per core once each thread has at least this many queries."""


class _Scorer(Protocol):
    """One backend: BM25 scores of a tokenized query, and its own files on disk."""

    num_passages: int
    parallel: bool
    """Whether `candidates` runs in parallel from several threads (it releases the GIL)."""

    def candidates(self, query: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Ascending row numbers (int64) and float64 scores of passages that may be among the k best.

        A superset of the k best by (score descending, row ascending) among the passages
        scoring above 0, and no passage scoring 0; `_best` ranks them.
        """
        ...

    def save(self, path: Path) -> None: ...


class _Bm25sScorer:
    """bm25s' precomputed (passage, term) score matrix, read column by column."""

    parallel = True

    def __init__(self, model: bm25s.BM25) -> None:
        self._model = model
        self._vocab: dict[str, int] = model.vocab_dict
        # Plain ndarray views of the (memory-mapped) arrays: np.memmap's Python-level indexing
        # hooks cost more than the lookups themselves.
        self._data: np.ndarray = np.asarray(model.scores["data"])
        self._doc_ids: np.ndarray = np.asarray(model.scores["indices"])
        self._indptr: np.ndarray = np.asarray(model.scores["indptr"])
        self.num_passages = int(model.scores["num_docs"])
        # Corpus-sized score arrays, all zero between searches; one per search in flight (the
        # gateway searches from several threads, and the kernel releases the GIL).
        self._free_buffers: list[np.ndarray] = []
        self._buffers_lock = threading.Lock()

    @classmethod
    def build(cls, corpus: list[list[str]], params: SparseParams) -> _Bm25sScorer:
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(token, len(vocab)) for token in doc] for doc in corpus]
        # float64 scores make the sums the same as rank_bm25's to the last bit or two, so
        # near-ties rank alike in both backends.
        model = bm25s.BM25(k1=params.k1, b=params.b, method="atire", idf_method="robertson", dtype="float64")
        model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), create_empty_token=False, show_progress=False)
        return cls(model)

    @classmethod
    def load(cls, path: Path, params: SparseParams) -> _Bm25sScorer:
        _check_files(path, _BM25S_FILES)
        try:
            model = bm25s.BM25.load(path, mmap=True, show_progress=False)
        except (OSError, ValueError) as e:
            raise RetrievalError(
                f"cannot read the bm25s index at {path} ({e}); delete the directory and rebuild it"
            ) from e
        stored = (model.method, model.idf_method, float(model.k1), float(model.b))
        if stored != ("atire", "robertson", params.k1, params.b):
            raise RetrievalError(
                f"bm25s files at {path} hold method/idf/k1/b {stored}, meta.json says k1={params.k1}, b={params.b}; "
                "delete the directory and rebuild the index"
            )
        scorer = cls(model)
        scorer._check(path)
        return scorer

    def _check(self, path: Path) -> None:
        """Refuse files whose arrays disagree: a search would read out of bounds or score wrong rows."""
        indptr, doc_ids = self._indptr, self._doc_ids
        n_terms = len(indptr) - 1
        term_ids = np.fromiter(self._vocab.values(), dtype=np.int64, count=len(self._vocab))
        problem = None
        if indptr.ndim != 1 or n_terms < 0 or len(self._data) != len(doc_ids):
            problem = "the score matrix arrays have mismatched shapes"
        elif int(indptr[0]) != 0 or int(indptr[-1]) != len(doc_ids) or np.any(np.diff(indptr) < 0):
            problem = f"indptr does not span the {len(doc_ids)} stored scores"
        elif n_terms != len(term_ids) or (len(term_ids) and not (term_ids.min() >= 0 and term_ids.max() < n_terms)):
            problem = f"the vocabulary holds {len(self._vocab)} terms, the score matrix {n_terms}"
        elif len(doc_ids) and not (0 <= int(doc_ids.min()) and int(doc_ids.max()) < self.num_passages):
            problem = f"passage ids outside 0..{self.num_passages - 1}"
        if problem is not None:
            raise RetrievalError(f"bm25s index at {path} is corrupt: {problem}; delete the directory and rebuild it")

    def candidates(self, query: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        terms = np.asarray(self._term_ids(query), dtype=np.int64)
        if len(terms) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        with self._buffers_lock:
            buffer = self._free_buffers.pop() if self._free_buffers else np.zeros(self.num_passages, dtype=np.float64)
        kernel = _postings_kernel()
        rows, scores = kernel(self._indptr[terms], self._indptr[terms + 1], self._doc_ids, self._data, buffer, k)
        # Only a buffer the kernel finished with is all zero again and fit for the next search.
        with self._buffers_lock:
            self._free_buffers.append(buffer)
        if len(rows) > 2 * k:
            # Of many passages tied at the lowest score only the k lowest rows can make the cut.
            tied = scores == scores.min()
            keep = ~tied | (np.cumsum(tied) <= k)
            rows, scores = rows[keep], scores[keep]
        return rows, scores

    def _term_ids(self, query: list[str]) -> list[int]:
        vocab = self._vocab
        return [vocab[token] for token in query if token in vocab]

    def save(self, path: Path) -> None:
        self._model.save(path, show_progress=False)


@functools.cache
def _postings_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """`sum_postings`, compiled by numba on first use and cached on disk for later processes.

    Two passes over the query terms' postings and nothing the size of the corpus: numpy needed
    a corpus-sized bincount and scan per query. The kernel releases the GIL, so searches from
    several threads use several cores.
    """
    import numba

    @numba.njit(cache=True, nogil=True)
    def sum_postings(
        starts: np.ndarray, ends: np.ndarray, doc_ids: np.ndarray, data: np.ndarray, scores: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ascending rows and scores of the passages scoring above 0 and at least the k-th best score.

        `scores` has one slot per passage, all zero on entry; it is left all zero.
        """
        # Pass 1: postings term after term from 0.0, so a passage's sum adds terms in query
        # order as rank_bm25 does.
        for t in range(len(starts)):
            for j in range(starts[t], ends[t]):
                scores[doc_ids[j]] += data[j]
        # Pass 2: read each passage's sum once (zeroing it marks it read and cleans up), keep a
        # running top k, and keep every passage that reaches the running k-th best so far.
        best = np.zeros(k, dtype=np.float64)  # ascending; best[0] is the k-th best so far
        size = 0
        for t in range(len(starts)):
            size += ends[t] - starts[t]
        rows = np.empty(size, dtype=np.int64)
        found = np.empty(size, dtype=np.float64)
        n = 0
        for t in range(len(starts)):
            for j in range(starts[t], ends[t]):
                row = doc_ids[j]
                score = scores[row]
                if score == 0.0:
                    continue
                scores[row] = 0.0
                if score > 0.0 and score >= best[0]:
                    rows[n] = row
                    found[n] = score
                    n += 1
                    if score > best[0]:
                        i = 0
                        while i + 1 < k and best[i + 1] < score:
                            best[i] = best[i + 1]
                            i += 1
                        best[i] = score
        kept = 0
        for i in range(n):
            if found[i] >= best[0]:
                rows[kept] = rows[i]
                found[kept] = found[i]
                kept += 1
        order = np.argsort(rows[:kept])
        return rows[:kept][order], found[:kept][order]

    return sum_postings


class _RankBm25Scorer:
    """rank_bm25's BM25Okapi, kept beside the token ids it was built from (for `save`)."""

    parallel = False

    def __init__(self, vocab: list[str], token_ids: np.ndarray, offsets: np.ndarray, params: SparseParams) -> None:
        self._vocab = vocab
        self._token_ids = token_ids
        self._offsets = offsets
        self.num_passages = len(offsets) - 1
        terms = np.asarray(vocab, dtype=object)
        corpus = [terms[token_ids[start:end]].tolist() for start, end in zip(offsets[:-1], offsets[1:], strict=True)]
        # epsilon=0: rank_bm25's default floors the idf of a word found in more than half the
        # passages at 0.25 x the mean idf, a rule bm25s has no equivalent of. With 0 such words
        # score 0, exactly like bm25s' "robertson" idf, so the two backends agree.
        self._bm25 = BM25Okapi(corpus, k1=params.k1, b=params.b, epsilon=0.0)

    @classmethod
    def build(cls, corpus: list[list[str]], params: SparseParams) -> _RankBm25Scorer:
        vocab: dict[str, int] = {}
        ids = [vocab.setdefault(token, len(vocab)) for doc in corpus for token in doc]
        offsets = np.zeros(len(corpus) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, corpus), dtype=np.int64, count=len(corpus)), out=offsets[1:])
        return cls(list(vocab), np.asarray(ids, dtype=np.int32), offsets, params)

    @classmethod
    def load(cls, path: Path, params: SparseParams) -> _RankBm25Scorer:
        _check_files(path, (_VOCAB, _TOKEN_IDS, _OFFSETS))
        try:
            vocab = json.loads((path / _VOCAB).read_text(encoding="utf-8"))
            token_ids = np.load(path / _TOKEN_IDS, mmap_mode="r", allow_pickle=False)
            offsets = np.load(path / _OFFSETS, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RetrievalError(
                f"cannot read the BM25 tokens at {path} ({e}); delete the directory and rebuild it"
            ) from e
        if (offsets.ndim != 1 or len(offsets) < 2 or int(offsets[0]) != 0 or int(offsets[-1]) != len(token_ids)
                or np.any(np.diff(offsets) < 0)):
            raise RetrievalError(f"BM25 index at {path} is inconsistent (offsets vs tokens); delete it and rebuild")
        if not isinstance(vocab, list) or (len(token_ids) and not (0 <= int(token_ids.min())
                                                                   and int(token_ids.max()) < len(vocab))):
            raise RetrievalError(
                f"BM25 index at {path} is corrupt: token ids outside its {_VOCAB}; delete the directory and rebuild it"
            )
        return cls(vocab, token_ids, offsets, params)

    def candidates(self, query: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.asarray(self._bm25.get_scores(query), dtype=np.float64)
        rows = np.flatnonzero(scores > 0)
        return rows, scores[rows]

    def save(self, path: Path) -> None:
        np.save(path / _TOKEN_IDS, np.asarray(self._token_ids, dtype=np.int32), allow_pickle=False)
        np.save(path / _OFFSETS, np.asarray(self._offsets, dtype=np.int64), allow_pickle=False)
        (path / _VOCAB).write_text(json.dumps(self._vocab, ensure_ascii=False), encoding="utf-8")


_SCORERS: dict[str, type[_Bm25sScorer] | type[_RankBm25Scorer]] = {
    "bm25s": _Bm25sScorer,
    "rank_bm25": _RankBm25Scorer,
}


class BM25Retriever:
    """Okapi BM25 over `tokenize(passage.contents)`, scored by the backend `params` name.

    Only passages scoring above 0 are returned: one sharing no word with the query (or only
    words in more than half the corpus, whose idf is 0) is no match, and ranking it would credit
    hit@k and recall for row order. A row therefore holds fewer than k passages, padded with
    `PAD_INDEX` / `PAD_SCORE`, when fewer match; a query of stopwords or unknown words gets none.
    """

    name = "sparse"

    def __init__(self, scorer: _Scorer, params: SparseParams) -> None:
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
        scorer = _SCORERS[params.backend].build(corpus, params)
        logger.debug("built %s BM25 index over %d passages", params.backend, len(passages))
        return cls(scorer, params)

    @property
    def num_passages(self) -> int:
        return self._scorer.num_passages

    @property
    def params(self) -> SparseParams:
        return self._params

    @staticmethod
    def cache_params(params: SparseParams) -> dict[str, Any]:
        """Everything that changes the stored index, for a cache key."""
        return {**asdict(_checked(params)), "tokenizer_version": TOKENIZER_VERSION, "format_version": _FORMAT_VERSION}

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """The k best passages per query, best first; ties go to the lower row.

        The batch is tokenized in one pass; each query then costs two compiled passes over the
        postings of its terms (bm25s; a large batch is shared among a thread per core) or one
        `get_scores` call (rank_bm25).
        """
        check_k(k)
        if isinstance(queries, str):
            raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
        tokens = tokenize_batch(queries, stopwords=self._params.stopwords, stemming=self._params.stemming)
        hits = empty_hits(len(tokens), k)
        take = min(k, self.num_passages)

        def rank(rows: range) -> None:
            for row in rows:
                found, scores = _best(*self._scorer.candidates(tokens[row], take), take)
                hits.indices[row, : len(found)] = found
                hits.scores[row, : len(found)] = scores

        threads = min(os.cpu_count() or 1, len(tokens) // _QUERIES_PER_THREAD) if self._scorer.parallel else 1
        if threads <= 1:
            rank(range(len(tokens)))
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(rank, (range(i, len(tokens), threads) for i in range(threads))))
        return hits

    def save(self, path: Path) -> None:
        """Write the index into directory `path` (no pickle); meta.json names backend and params."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._scorer.save(path)
        meta = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "tokenizer_version": TOKENIZER_VERSION,
            "params": asdict(self._params),
            "num_passages": self.num_passages,
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
        if params is not None and _checked(params) != saved:
            raise RetrievalError(
                f"BM25 index at {path} was built with {saved}, not {params}; "
                "load it with params=None, or delete the directory and rebuild it with the new parameters"
            )
        scorer = _SCORERS[saved.backend].load(path, saved)
        if scorer.num_passages != num_passages:
            raise RetrievalError(
                f"BM25 index at {path} holds {scorer.num_passages} passages, its meta.json says {num_passages}; "
                "delete the directory and rebuild the index"
            )
        logger.debug("loaded %s BM25 index (%d passages) from %s", saved.backend, scorer.num_passages, path)
        return cls(scorer, saved)


def _check_files(path: Path, names: Sequence[str]) -> None:
    """Open each stored file on its own, so a missing, truncated or garbled one is named in the error."""
    for name in names:
        file = path / name
        try:
            if name.endswith(".npy"):
                np.load(file, mmap_mode="r", allow_pickle=False)
            else:
                json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise RetrievalError(
                f"cannot read {file} ({e}); the BM25 index at {path} is incomplete: delete the directory and rebuild it"
            ) from e


def _checked(params: SparseParams) -> SparseParams:
    """`params` with plain float/bool values, or an error naming the valid values."""
    if params.backend not in BACKENDS:
        raise RetrievalError(
            f"unknown BM25 backend {params.backend!r}; set retriever.sparse.backend to one of {list(BACKENDS)}"
        )
    if params.k1 < 0 or not 0.0 <= params.b <= 1.0:
        raise RetrievalError(
            f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={params.k1}, b={params.b}; the usual values are 1.5 and 0.75"
        )
    return SparseParams(
        backend=params.backend,
        k1=float(params.k1),
        b=float(params.b),
        stopwords=bool(params.stopwords),
        stemming=bool(params.stemming),
    )


def _best(rows: np.ndarray, scores: np.ndarray, take: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `take` of the candidates (ascending rows scoring above 0), best first.

    Passages outside the candidates score 0: they share no word with the query (or only words
    whose idf is floored at 0), so they are left out, not used to fill the row; the rest of the
    row stays padding. argpartition alone would pick an arbitrary subset of the passages tied
    at the k-th score; the lowest rows win here.
    """
    if len(rows) > take:
        kth = np.partition(scores, len(scores) - take)[len(scores) - take]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)[: take - len(above)]
        keep = np.concatenate((above, tied))
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


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
