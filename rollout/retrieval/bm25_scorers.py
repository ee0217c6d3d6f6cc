"""The two BM25 backends behind `BM25Retriever`: bm25s' score matrix and rank_bm25, with their files."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

from rollout.errors import RetrievalError
from rollout.retrieval.bm25_kernels import PostingsIndex
from rollout.retrieval.bm25_pruned import SCORE_MATRIX_FILES, ScoreBounds, compute_bounds, load_bounds
from rollout.retrieval.params import SparseParams

_VOCAB = "vocab.json"
_TOKEN_IDS = "token_ids.npy"
_OFFSETS = "offsets.npy"
_BM25S_FILES = (*SCORE_MATRIX_FILES, "vocab.index.json", "params.index.json")
"""The files `bm25s.BM25.save` writes."""


class Scorer(Protocol):
    """One backend: the best passages of tokenized queries, and its own files on disk."""

    num_passages: int
    parallel: bool
    """Whether `top_k` runs in parallel from several threads (it releases the GIL)."""

    def top_k(self, queries: Sequence[list[str]], take: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows (int64, -1 pads) and float64 scores (-inf pads) of the `take` best passages per query.

        Best first, ties to the lower row, only passages scoring above 0; `take` is at most
        `num_passages`.
        """
        ...

    def save(self, path: Path) -> None: ...


class Bm25sScorer:
    """bm25s' precomputed (passage, term) score matrix, searched by bm25s' compiled retrieval."""

    parallel = True

    def __init__(self, model: bm25s.BM25, bounds: ScoreBounds | None = None) -> None:
        """`bounds` (of the model's score matrix) let queries skip passages: `retriever.sparse.pruning=on`."""
        self._model = model
        self._vocab: dict[str, int] = model.vocab_dict
        self.postings = PostingsIndex(model.scores["data"], model.scores["indices"], model.scores["indptr"],
                                      model.scores["num_docs"], bounds, "pruned" if bounds is not None else "postings")
        self.num_passages = self.postings.num_passages

    @classmethod
    def build(cls, corpus: list[list[str]], params: SparseParams) -> Bm25sScorer:
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(token, len(vocab)) for token in doc] for doc in corpus]
        # float64 scores make the sums the same as rank_bm25's to the last bit or two, so
        # near-ties rank alike in both backends.
        model = bm25s.BM25(k1=params.k1, b=params.b, method="atire", idf_method=params.method, dtype="float64")
        model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), create_empty_token=False, show_progress=False)
        s = model.scores
        scorer = cls(model, compute_bounds(s["indptr"], s["indices"], s["data"]) if params.pruning == "on" else None)
        scorer.postings.warm_up()
        return scorer

    @classmethod
    def load(cls, path: Path, params: SparseParams) -> Bm25sScorer:
        check_files(path, _BM25S_FILES)
        try:
            model = bm25s.BM25.load(path, mmap=True, show_progress=False)
        except (OSError, ValueError) as e:
            raise RetrievalError(
                f"cannot read the bm25s index at {path} ({e}); delete the directory and rebuild it"
            ) from e
        stored = (model.method, model.idf_method, float(model.k1), float(model.b))
        if stored != ("atire", params.method, params.k1, params.b):
            raise RetrievalError(
                f"bm25s files at {path} hold method/idf/k1/b {stored}, meta.json says idf {params.method}, "
                f"k1={params.k1}, b={params.b}; "
                "delete the directory and rebuild the index"
            )
        if _stamps(path) != _read_checked(path):
            cls(model)._check(path)
            _write_checked(path)
        s = model.scores
        scorer = cls(model, load_bounds(path, s["indptr"], s["indices"], s["data"]) if params.pruning == "on" else None)
        # Ready means ready: the first query must not wait seconds for a compile.
        scorer.postings.warm_up()
        return scorer

    def _check(self, path: Path) -> None:
        """Refuse files whose arrays disagree: a search would read out of bounds or score wrong rows."""
        p = self.postings
        indptr, doc_ids = p.indptr, p.doc_ids
        n_terms = len(indptr) - 1
        term_ids = np.fromiter(self._vocab.values(), dtype=np.int64, count=len(self._vocab))
        problem = None
        if indptr.ndim != 1 or n_terms < 0 or len(p.data) != len(doc_ids):
            problem = "the score matrix arrays have mismatched shapes"
        elif int(indptr[0]) != 0 or int(indptr[-1]) != len(doc_ids) or np.any(np.diff(indptr) < 0):
            problem = f"indptr does not span the {len(doc_ids)} stored scores"
        elif n_terms != len(term_ids) or (len(term_ids) and not (term_ids.min() >= 0 and term_ids.max() < n_terms)):
            problem = f"the vocabulary holds {len(self._vocab)} terms, the score matrix {n_terms}"
        elif len(doc_ids) and not (0 <= int(doc_ids.min()) and int(doc_ids.max()) < self.num_passages):
            problem = f"passage ids outside 0..{self.num_passages - 1}"
        if problem is not None:
            raise RetrievalError(f"bm25s index at {path} is corrupt: {problem}; delete the directory and rebuild it")

    def term_ids(self, queries: Sequence[list[str]]) -> list[np.ndarray]:
        """The vocabulary ids of each query's known tokens, in query order, repeats kept."""
        vocab = self._vocab
        return [np.fromiter((vocab[t] for t in query if t in vocab), dtype=np.int64) for query in queries]

    def top_k(self, queries: Sequence[list[str]], take: int) -> tuple[np.ndarray, np.ndarray]:
        return self.postings.top_k(self.term_ids(queries), take)

    def save(self, path: Path) -> None:
        self._model.save(path, show_progress=False)


_CHECKED = "checked.json"
"""Size and mtime of each file of a bm25s index when its arrays were last found consistent: a load of the same
files skips the check, which reads every posting (hundreds of MB resident before the first query at 2M passages)."""


def _stamps(path: Path) -> dict[str, list[int]]:
    stamps = {}
    for name in _BM25S_FILES:
        st = (path / name).stat()
        stamps[name] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return stamps


def _read_checked(path: Path) -> dict[str, list[int]] | None:
    try:
        return json.loads((path / _CHECKED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_checked(path: Path) -> None:
    try:
        (path / _CHECKED).write_text(json.dumps(_stamps(path)), encoding="utf-8")
    except OSError:  # a read-only cache: the next load checks again
        pass


class LuceneIdfOkapi(BM25Okapi):
    """rank_bm25's Okapi BM25 with Lucene's idf, log(1 + (N - df + 0.5) / (df + 0.5)), never 0 (`method=lucene`):
    bm25s' `method="atire", idf_method="lucene"`."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


class RankBm25Scorer:
    """rank_bm25's BM25Okapi, kept beside the token ids it was built from (for `save`)."""

    parallel = False

    def __init__(self, vocab: list[str], token_ids: np.ndarray, offsets: np.ndarray, params: SparseParams) -> None:
        self._vocab = vocab
        self._token_ids = token_ids
        self._offsets = offsets
        self.num_passages = len(offsets) - 1
        terms = np.asarray(vocab, dtype=object)
        corpus = [terms[token_ids[start:end]].tolist() for start, end in itertools.pairwise(offsets)]
        # epsilon=0: rank_bm25's default floors the idf of a word found in more than half the
        # passages at 0.25 x the mean idf, a rule bm25s has no equivalent of. With 0 such words
        # score 0, exactly like bm25s' "robertson" idf, so the two backends agree.
        okapi = LuceneIdfOkapi if params.method == "lucene" else BM25Okapi
        self._bm25 = okapi(corpus, k1=params.k1, b=params.b, epsilon=0.0)

    @classmethod
    def build(cls, corpus: list[list[str]], params: SparseParams) -> RankBm25Scorer:
        vocab: dict[str, int] = {}
        ids = [vocab.setdefault(token, len(vocab)) for doc in corpus for token in doc]
        offsets = np.zeros(len(corpus) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, corpus), dtype=np.int64, count=len(corpus)), out=offsets[1:])
        return cls(list(vocab), np.asarray(ids, dtype=np.int32), offsets, params)

    @classmethod
    def load(cls, path: Path, params: SparseParams) -> RankBm25Scorer:
        check_files(path, (_VOCAB, _TOKEN_IDS, _OFFSETS))
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

    def top_k(self, queries: Sequence[list[str]], take: int) -> tuple[np.ndarray, np.ndarray]:
        rows_out = np.full((len(queries), take), -1, dtype=np.int64)
        scores_out = np.full((len(queries), take), -np.inf, dtype=np.float64)
        for q, query in enumerate(queries):
            scores = np.asarray(self._bm25.get_scores(query), dtype=np.float64)
            rows = np.flatnonzero(scores > 0)
            # lexsort: best first, ties to the lower row.
            best = rows[np.lexsort((rows, -scores[rows]))[:take]]
            rows_out[q, : len(best)], scores_out[q, : len(best)] = best, scores[best]
        return rows_out, scores_out

    def save(self, path: Path) -> None:
        np.save(path / _TOKEN_IDS, np.asarray(self._token_ids, dtype=np.int32), allow_pickle=False)
        np.save(path / _OFFSETS, np.asarray(self._offsets, dtype=np.int64), allow_pickle=False)
        (path / _VOCAB).write_text(json.dumps(self._vocab, ensure_ascii=False), encoding="utf-8")


SCORERS: dict[str, type[Bm25sScorer | RankBm25Scorer]] = {
    "bm25s": Bm25sScorer,
    "rank_bm25": RankBm25Scorer,
}


def check_files(path: Path, names: Sequence[str]) -> None:
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
