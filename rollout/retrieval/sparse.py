"""BM25 keyword index over the shared tokenizer, backed by rank_bm25's BM25Okapi."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from rollout.data.records import Passage
from rollout.retrieval.base import Hits, check_k, empty_hits, top_k_hits
from rollout.retrieval.errors import RetrievalError
from rollout.retrieval.tokenizer import TOKENIZER_VERSION, tokenize

logger = logging.getLogger(__name__)

DEFAULT_EPSILON = 0.25
"""rank_bm25's floor for negative idf, as a fraction of the mean idf."""

_FORMAT = "rollout-bm25-tokens"
_FORMAT_VERSION = 1
_META = "meta.json"
_VOCAB = "vocab.json"
_TOKEN_IDS = "token_ids.npy"
_OFFSETS = "offsets.npy"


class BM25Retriever:
    """Okapi BM25 over `tokenize(passage.contents)`; scores are rank_bm25's, unchanged.

    Every passage is scored, so a row holds k passages whenever the corpus has k, including
    passages that share no word with the query (score 0).
    """

    name = "sparse"

    def __init__(
        self,
        corpus_tokens: Sequence[Sequence[str]],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = DEFAULT_EPSILON,
    ) -> None:
        if len(corpus_tokens) == 0:
            raise RetrievalError("cannot build a BM25 index over an empty corpus; pass at least one passage")
        if not any(corpus_tokens):
            raise RetrievalError(
                "every passage tokenized to nothing (only stopwords or punctuation); "
                "check that the corpus passages carry text"
            )
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise RetrievalError(
                f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}; the usual values are 1.5 and 0.75"
            )
        self.k1 = float(k1)
        self.b = float(b)
        self.epsilon = float(epsilon)
        self._corpus_tokens = [list(doc) for doc in corpus_tokens]
        self._bm25 = BM25Okapi(self._corpus_tokens, k1=self.k1, b=self.b, epsilon=self.epsilon)

    @classmethod
    def build(
        cls, passages: Sequence[Passage], *, k1: float = 1.5, b: float = 0.75, epsilon: float = DEFAULT_EPSILON
    ) -> BM25Retriever:
        """Tokenize title and text of every passage and index them."""
        return cls([tokenize(p.contents) for p in passages], k1=k1, b=b, epsilon=epsilon)

    @property
    def num_passages(self) -> int:
        return len(self._corpus_tokens)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Rank every passage per query with `BM25Okapi.get_scores`; ties go to the lower row."""
        check_k(k)
        if isinstance(queries, str):
            raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
        hits = empty_hits(len(queries), k)
        # One row at a time keeps memory at one score vector however many queries come in.
        for row, query in enumerate(queries):
            scores = np.asarray(self._bm25.get_scores(tokenize(query)), dtype=np.float64)
            one = top_k_hits(scores[np.newaxis, :], k)
            hits.indices[row] = one.indices[0]
            hits.scores[row] = one.scores[0]
        return hits

    def save(self, path: Path) -> None:
        """Write the tokenized corpus as token ids + vocabulary (no pickle) into directory `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        vocab: dict[str, int] = {}
        ids = [vocab.setdefault(token, len(vocab)) for doc in self._corpus_tokens for token in doc]
        lengths = np.fromiter((len(doc) for doc in self._corpus_tokens), dtype=np.int64, count=self.num_passages)
        offsets = np.zeros(self.num_passages + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        np.save(path / _TOKEN_IDS, np.asarray(ids, dtype=np.int32), allow_pickle=False)
        np.save(path / _OFFSETS, offsets, allow_pickle=False)
        (path / _VOCAB).write_text(json.dumps(list(vocab), ensure_ascii=False), encoding="utf-8")
        meta: dict[str, Any] = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "tokenizer_version": TOKENIZER_VERSION,
            "k1": self.k1,
            "b": self.b,
            "epsilon": self.epsilon,
            "num_passages": self.num_passages,
            "num_tokens": len(ids),
        }
        (path / _META).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> BM25Retriever:
        """Read a directory written by `save` and rebuild the BM25 statistics from its tokens."""
        path = Path(path)
        meta = _read_meta(path)
        vocab = json.loads((path / _VOCAB).read_text(encoding="utf-8"))
        token_ids = np.load(path / _TOKEN_IDS, allow_pickle=False)
        offsets = np.load(path / _OFFSETS, allow_pickle=False)
        if len(offsets) != meta["num_passages"] + 1 or int(offsets[-1]) != len(token_ids):
            raise RetrievalError(f"BM25 index at {path} is inconsistent (offsets vs tokens); delete it and rebuild")
        terms = np.asarray(vocab, dtype=object)
        corpus = [terms[token_ids[start:end]].tolist() for start, end in zip(offsets[:-1], offsets[1:], strict=True)]
        logger.debug("read %d BM25 documents from %s", len(corpus), path)
        return cls(corpus, k1=meta["k1"], b=meta["b"], epsilon=meta["epsilon"])


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / _META
    if not meta_path.is_file():
        raise RetrievalError(
            f"no BM25 index at {path} ({_META} missing); build one with BM25Retriever.build(...).save(path)"
        )
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("format") != _FORMAT or meta.get("format_version") != _FORMAT_VERSION:
        raise RetrievalError(
            f"{path} holds format {meta.get('format')!r} v{meta.get('format_version')}, this code reads "
            f"{_FORMAT!r} v{_FORMAT_VERSION}; delete the directory and rebuild the index"
        )
    if meta.get("tokenizer_version") != TOKENIZER_VERSION:
        raise RetrievalError(
            f"BM25 index at {path} was tokenized with tokenizer v{meta.get('tokenizer_version')}, queries now use "
            f"v{TOKENIZER_VERSION}; delete the directory and rebuild the index"
        )
    return meta
