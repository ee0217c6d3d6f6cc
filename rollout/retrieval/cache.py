"""Build each index once per corpus and parameters; later runs load it from disk."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rollout.data.records import Passage
from rollout.retrieval.base import Retriever
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.encoder import Encoder, TextEncoder
from rollout.retrieval.errors import RetrievalError
from rollout.retrieval.sparse import DEFAULT_EPSILON, BM25Retriever
from rollout.retrieval.tokenizer import TOKENIZER_VERSION

logger = logging.getLogger(__name__)

INDEX_KINDS: tuple[str, ...] = ("dense", "sparse")
"""Index names `load_or_build_indexes` accepts, as the gateway's tools require them."""

_CACHE_VERSION = 1
_INFO = "cache_info.json"

_R = TypeVar("_R", DenseRetriever, BM25Retriever)


def corpus_fingerprint(passages: Sequence[Passage]) -> str:
    """sha256 over ids and contents in order; any edit, reorder or addition changes it."""
    digest = hashlib.sha256()
    for p in passages:
        # One JSON array per passage keeps the encoding unambiguous whatever the text holds.
        digest.update(json.dumps([p.id, p.contents], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def cache_key(kind: str, corpus_hash: str, params: dict[str, Any]) -> str:
    """sha256 of everything that decides an index's content."""
    payload = {"kind": kind, "cache_version": _CACHE_VERSION, "corpus": corpus_hash, "params": params}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def load_or_build_indexes(
    passages: Sequence[Passage],
    cache_dir: Path,
    *,
    which: Iterable[str] = INDEX_KINDS,
    encoder: TextEncoder | None = None,
    bm25_k1: float = 1.5,
    bm25_b: float = 0.75,
) -> dict[str, Retriever]:
    """Return the requested retrievers, loading each from `cache_dir` or building and caching it.

    A cache directory is named `<kind>-<first 16 hex of the key>`; the key covers the corpus
    (ids and contents) and the parameters that shape the stored index: model id and passage
    prefix for dense; k1, b, epsilon and tokenizer version for sparse. The query prefix is left out on
    purpose: it is applied at search time and changing it must not re-encode the corpus.
    With no `encoder`, the bundled all-MiniLM-L6-v2 is loaded when "dense" is requested.
    """
    kinds = _check_which(which)
    if len(passages) == 0:
        raise RetrievalError("the corpus is empty; load passages before building indexes")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    corpus_hash = corpus_fingerprint(passages)
    retrievers: dict[str, Retriever] = {}
    for kind in kinds:
        if kind == "dense":
            enc = Encoder() if encoder is None else encoder
            params: dict[str, Any] = {"model_id": enc.model_id, "passage_prefix": enc.passage_prefix}
            retrievers[kind] = _load_or_build(
                cache_dir / f"dense-{cache_key(kind, corpus_hash, params)[:16]}",
                kind,
                params,
                len(passages),
                build=lambda: DenseRetriever.build(passages, encoder=enc),
                load=lambda path: DenseRetriever.load(path, encoder=enc),
            )
        else:
            params = {
                "k1": float(bm25_k1),
                "b": float(bm25_b),
                "epsilon": DEFAULT_EPSILON,
                "tokenizer_version": TOKENIZER_VERSION,
            }
            retrievers[kind] = _load_or_build(
                cache_dir / f"sparse-{cache_key(kind, corpus_hash, params)[:16]}",
                kind,
                params,
                len(passages),
                build=lambda: BM25Retriever.build(passages, k1=bm25_k1, b=bm25_b),
                load=BM25Retriever.load,
            )
    return retrievers


def _check_which(which: Iterable[str]) -> list[str]:
    if isinstance(which, str):
        which = [which]
    kinds = list(dict.fromkeys(which))
    unknown = [k for k in kinds if k not in INDEX_KINDS]
    if unknown:
        raise RetrievalError(f"unknown index kind(s) {unknown}; choose from {list(INDEX_KINDS)}")
    if not kinds:
        raise RetrievalError(f"no index requested; pass which= with some of {list(INDEX_KINDS)}")
    return kinds


def _load_or_build(
    final: Path,
    kind: str,
    params: dict[str, Any],
    num_passages: int,
    *,
    build: Callable[[], _R],
    load: Callable[[Path], _R],
) -> _R:
    if final.is_dir():
        started = time.perf_counter()
        try:
            retriever = load(final)
        except Exception as e:
            raise RetrievalError(
                f"cannot read the cached {kind} index at {final} ({e}); delete that directory to rebuild it"
            ) from e
        if retriever.num_passages != num_passages:
            raise RetrievalError(
                f"cached {kind} index at {final} holds {retriever.num_passages} passages, the corpus has "
                f"{num_passages}; delete that directory to rebuild it"
            )
        seconds = time.perf_counter() - started
        logger.info("loaded %s index (%d passages) from %s in %.2f s", kind, num_passages, final, seconds)
        return retriever

    started = time.perf_counter()
    retriever = build()
    seconds = time.perf_counter() - started
    # Write next to the final directory, then rename: a reader sees a complete index or none.
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        retriever.save(tmp)
        info = {"kind": kind, "params": params, "num_passages": num_passages, "build_seconds": round(seconds, 3)}
        (tmp / _INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process finished the same index first; theirs is equivalent to ours.
            if not final.is_dir():
                raise
            logger.debug("%s appeared while building; keeping the existing copy", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built %s index (%d passages) in %.2f s, cached at %s", kind, num_passages, seconds, final)
    return retriever
