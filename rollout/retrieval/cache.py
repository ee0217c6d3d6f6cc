"""Build each index once per corpus and parameters; later runs load it from disk."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from rollout.cache_folder import discard, remove_abandoned, temp_dir_for, writes_cache
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import Retriever
from rollout.retrieval.dense import DenseRetriever, encode_corpus
from rollout.retrieval.dense_shards import (
    ShardedDenseRetriever,
    build_shards_into,
    check_shard_count,
    load_shards,
    split_index_into,
)
from rollout.retrieval.doc_passages import BestPassageRetriever, passage_view
from rollout.retrieval.encoder import TextEncoder, load_encoder
from rollout.retrieval.hybrid import HybridRetriever
from rollout.retrieval.lucene import LuceneRetriever, corpus_rows_of
from rollout.retrieval.params import DenseParams, RetrievalParams, check_dense_source
from rollout.retrieval.ray_build import RayBuild, build_dense_on_ray, build_shards_on_ray, ray_tokenizer
from rollout.retrieval.sparse import BM25Retriever
from rollout.retrieval.tevatron_shards import (
    check_cached_width,
    open_shard_index,
    read_shards_into,
    shard_paths,
    shards_cache_params,
)

logger = logging.getLogger(__name__)

INDEX_KINDS: tuple[str, ...] = ("dense", "sparse", "hybrid")
"""Retriever names `load_or_build_indexes` accepts; "hybrid" brings "dense" and "sparse" along."""

_CACHE_VERSION = 2
_INFO = "cache_info.json"

_R = TypeVar("_R", DenseRetriever, ShardedDenseRetriever, BM25Retriever)


def corpus_fingerprint(passages: Sequence[Passage]) -> str:
    """sha256 over ids and contents in order; any edit, reorder or addition changes it. A corpus store computed it
    as it was written (`rollout.data.corpus_store`): a start reads no passage for it."""
    stored = getattr(passages, "fingerprint", None)
    if isinstance(stored, str):
        return stored
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


def dense_cache_params(params: DenseParams, encoder: TextEncoder) -> dict[str, Any]:
    """What shapes the stored dense index: model, passage prefix, index type, HNSW and IVF build settings.

    Query prefix, ef_search and ivf_nprobe are left out on purpose: they apply at search time,
    and changing them must not re-encode the corpus, rebuild the graph or retrain the lists. The encoder
    backend is in the key when it is not torch (vectors from another backend are other vectors); torch
    indexes keep the key they had before backends existed, so existing caches stay valid.
    """
    key: dict[str, Any] = {
        "model_id": encoder.model_id,
        "passage_prefix": encoder.passage_prefix,
        "index": params.index,
    }
    if params.pooling is not None:  # only when set: keys of indexes built before the setting existed stay valid
        key["pooling"] = params.pooling
    # Encoders that declare no backend (test doubles, user encoders) compute vectors like torch does.
    backend = getattr(encoder, "backend", "torch")
    if backend != "torch":
        key["encoder_backend"] = backend
    if params.index == "hnsw":
        key["hnsw_m"] = params.hnsw_m
        key["ef_construction"] = params.ef_construction
    if params.index == "ivf":
        key["ivf_nlist"] = params.ivf_nlist
        key["ivf_pq_m"] = params.ivf_pq_m
    return key


@writes_cache
def load_or_build_indexes(
    passages: Sequence[Passage],
    cache_dir: Path,
    *,
    which: Iterable[str],
    params: RetrievalParams | None = None,
    encoder: TextEncoder | None = None,
    corpus_path: str | Path | None = None,
    on_ray: RayBuild | None = None,
) -> dict[str, Retriever]:
    """Return the requested retrievers, loading each index from `cache_dir` or building and caching it.

    `which` holds some of "dense", "sparse" and "hybrid"; "hybrid" fuses a dense and a sparse
    index, so it returns all three. A cache directory is named `<kind>-<first 16 hex of the
    key>`; the key covers the corpus (ids and contents) and `dense_cache_params` or
    `BM25Retriever.cache_params`. With `params.dense.index_path` set, the dense index is that
    file (not cached); with `params.dense.tevatron_shards` set, it is those shards, read once into the cache
    (`rollout.retrieval.tevatron_shards`); with `params.sparse.index_path` set, the sparse one is that Pyserini Lucene
    index. With `params.dense.passage_tokens` set, the dense index holds passages cut from the rows and answers
    with rows, each by its best passage (`rollout.retrieval.doc_passages`). With no `encoder`, one is loaded from
    `params.dense` only when needed.
    `corpus_path` only names the corpus file in error messages. With `on_ray`, an index that must be built is
    built on the connected Ray cluster (`rollout.retrieval.ray_build`): the same index, cached the same way.
    Temporaries that killed builds left in `cache_dir` are removed first (`rollout.cache_folder`); a `cache_dir` that
    cannot be written is a `ConfigError` naming it.
    """
    params = RetrievalParams() if params is None else params
    kinds = _check_which(which)
    if len(passages) == 0:
        raise RetrievalError("the corpus is empty; load passages before building indexes")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    remove_abandoned(cache_dir)
    corpus_hash = corpus_fingerprint(passages)
    retrievers: dict[str, Retriever] = {}
    if "dense" in kinds:
        enc = _make_encoder(params.dense, cache_dir) if encoder is None else encoder
        if params.dense.passage_tokens is None:
            retrievers["dense"] = _dense(_DenseSource(passages, cache_dir, corpus_hash, enc, corpus_path, on_ray),
                                         params.dense)
        else:  # passages of the rows, encoded; the rows ranked by their best (not built on Ray: a view has no store)
            view = passage_view(passages, corpus_hash, cache_dir, params.dense.passage_tokens,
                                params.dense.passage_overlap)
            retrievers["dense"] = BestPassageRetriever(
                _dense(_DenseSource(view, cache_dir, view.fingerprint, enc, corpus_path, None), params.dense), view)
    if "sparse" in kinds and params.sparse.index_path is not None:
        started = time.perf_counter()
        retrievers["sparse"] = LuceneRetriever.open(
            params.sparse.index_path, corpus_rows_of(passages), k1=params.sparse.k1, b=params.sparse.b,
            passages=passages,
        )
        logger.info(
            "opened Lucene index %s in %.2f s (Java and Pyserini start included)",
            params.sparse.index_path, time.perf_counter() - started,
        )
    elif "sparse" in kinds:
        sparse_params = BM25Retriever.cache_params(params.sparse)
        retrievers["sparse"] = _load_or_build(
            cache_dir / f"sparse-{cache_key('sparse', corpus_hash, sparse_params)[:16]}",
            "sparse",
            sparse_params,
            len(passages),
            build_into=lambda path: BM25Retriever.build_into(
                passages, path, params.sparse, tokenizer=None if on_ray is None else ray_tokenizer(on_ray)),
            load=lambda path: BM25Retriever.load(path, params.sparse),
        )
    if "hybrid" in kinds:
        retrievers["hybrid"] = HybridRetriever(
            retrievers["dense"],
            retrievers["sparse"],
            rrf_k=params.hybrid.rrf_k,
            candidates=params.hybrid.candidates,
        )
    return retrievers


def _make_encoder(params: DenseParams, cache_dir: Path) -> TextEncoder:
    """The encoder `params` names; an ONNX backend's export is cached beside the indexes in `cache_dir`."""
    return load_encoder(params, cache_dir=cache_dir)


@dataclass(frozen=True, slots=True)
class _DenseSource:
    """What a dense index is made from, whatever its parameters: the rows, where it is cached and under which
    fingerprint, the encoder, the corpus file errors name, and the Ray cluster that builds it (None: here)."""

    passages: Sequence[Passage]
    cache_dir: Path
    corpus_hash: str
    encoder: TextEncoder
    corpus_path: str | Path | None
    on_ray: RayBuild | None


def _dense(src: _DenseSource, params: DenseParams) -> DenseRetriever | ShardedDenseRetriever:
    if params.shards > 1 or params.serve:
        sharded = _dense_shards_entry(src, params)
        return _served(sharded, params, src.encoder) if params.serve else sharded
    if params.index_path is not None:
        started = time.perf_counter()
        retriever = DenseRetriever.from_existing_index(
            params.index_path, src.passages, encoder=src.encoder, params=params, corpus_path=src.corpus_path
        )
        logger.info(
            "loaded dense index (%d passages) from existing file %s in %.2f s",
            retriever.num_passages, params.index_path, time.perf_counter() - started,
        )
        return retriever
    if params.tevatron_shards is not None:
        return _dense_from_shards(src.passages, src.cache_dir, src.corpus_hash, params, src.encoder)
    key_params = dense_cache_params(params, src.encoder)
    return _load_or_build(
        src.cache_dir / f"dense-{params.index}-{cache_key('dense', src.corpus_hash, key_params)[:16]}",
        "dense",
        key_params,
        len(src.passages),
        build=None if src.on_ray else lambda: DenseRetriever.build(src.passages, encoder=src.encoder, params=params),
        build_into=None if src.on_ray is None else (
            lambda path: build_dense_on_ray(src.passages, src.encoder, params, src.cache_dir, path, src.on_ray)),
        load=lambda path: DenseRetriever.load(path, encoder=src.encoder, params=params),
    )


def _served(sharded: ShardedDenseRetriever, params: DenseParams, encoder: TextEncoder) -> ShardedDenseRetriever:
    """The cached shards searched through Ray Serve, each its own application (`retriever.dense.serve=true`)."""
    from rollout.retrieval.dense_serve import served_shards  # here: it imports Ray Serve, which a gateway may lack

    sharded.close()  # the shards were only mapped; Serve's replicas search them
    assert sharded.folder is not None
    return served_shards(sharded.folder, encoder=encoder, params=params)


def _dense_shards_entry(src: _DenseSource, params: DenseParams) -> ShardedDenseRetriever:
    """The index in `params.shards` row ranges (`rollout.retrieval.dense_shards`), cached: built from the corpus
    (on Ray with `src.on_ray`), or split once from the index that `index_path` or `tevatron_shards` names."""
    check_shard_count(params.shards, len(src.passages))
    whole = replace(params, shards=1, serve=False)
    load = lambda path: load_shards(path, encoder=src.encoder, params=params)  # noqa: E731
    if params.index_path is not None or params.tevatron_shards is not None:
        if params.index_path is not None:
            source = Path(params.index_path)
            if not source.is_file():
                raise RetrievalError(f"no faiss index file at {source}; fix retriever.dense.index_path, or unset it to "
                                     "build a dense index from the corpus")
            st = source.stat()  # the file's identity, as for Tevatron's shards: its content is not read at every start
            key_params: dict[str, Any] = {"index_path": [str(source.resolve()), st.st_size, st.st_mtime_ns]}
        else:
            source = Path(params.tevatron_shards)
            key_params = shards_cache_params(shard_paths(params.tevatron_shards))
        key_params = {**key_params, "shards": params.shards}

        def split(path: Path) -> ShardedDenseRetriever:
            retriever = _dense(replace(src, on_ray=None), whole)
            assert isinstance(retriever, DenseRetriever)
            return split_index_into(path, retriever.faiss_index, str(source), encoder=src.encoder, params=params)

        return _load_or_build(
            src.cache_dir / f"dense-split{params.shards}-{cache_key('dense', src.corpus_hash, key_params)[:16]}",
            "dense", key_params, len(src.passages), build_into=split, load=load,
            rows_are_passages=params.tevatron_shards is None,
        )
    key_params = {**dense_cache_params(params, src.encoder), "shards": params.shards}

    def build_into(path: Path) -> ShardedDenseRetriever:
        if src.on_ray is not None:
            return build_shards_on_ray(src.passages, src.encoder, params, src.cache_dir, path, src.on_ray)
        vectors = encode_corpus(src.passages, src.encoder)
        return build_shards_into(path, lambda start, stop: vectors[start:stop], len(src.passages), encoder=src.encoder,
                                 params=params)

    return _load_or_build(
        src.cache_dir / f"dense-{params.index}-s{params.shards}-"
                        f"{cache_key('dense', src.corpus_hash, key_params)[:16]}",
        "dense", key_params, len(src.passages), build_into=build_into, load=load,
    )


def _dense_from_shards(
    passages: Sequence[Passage], cache_dir: Path, corpus_hash: str, params: DenseParams, encoder: TextEncoder
) -> DenseRetriever:
    """The index read from Tevatron shards: from the cache, else read once (no encoding; not built on Ray)."""
    assert params.tevatron_shards is not None
    check_dense_source(params)
    paths = shard_paths(params.tevatron_shards)
    key_params = shards_cache_params(paths)
    final = cache_dir / f"dense-shards-{cache_key('dense', corpus_hash, key_params)[:16]}"
    check_cached_width(final, encoder, params.tevatron_shards)
    return _load_or_build(
        final,
        "dense",
        key_params,
        len(passages),
        build_into=lambda path: read_shards_into(path, paths, passages, encoder=encoder, params=params),
        load=lambda path: open_shard_index(path, encoder=encoder, params=params),
        rows_are_passages=False,
    )


def _check_which(which: Iterable[str]) -> list[str]:
    if isinstance(which, str):
        which = [which]
    kinds = list(dict.fromkeys(which))
    unknown = [k for k in kinds if k not in INDEX_KINDS]
    if unknown:
        raise RetrievalError(f"unknown index kind(s) {unknown}; choose from {list(INDEX_KINDS)}")
    if not kinds:
        raise RetrievalError(f"no index requested; pass which= with some of {list(INDEX_KINDS)}")
    if "hybrid" in kinds:
        kinds += [k for k in ("dense", "sparse") if k not in kinds]
    return kinds


def _load_checked(
    final: Path, kind: str, num_passages: int, load: Callable[[Path], _R], rows_are_passages: bool = True
) -> tuple[_R | None, str | None]:
    """The cached index, or None and why it cannot be used (unreadable, truncated, or of another corpus size)."""
    try:
        retriever = load(final)
    # A truncated or corrupt file fails in numpy, faiss, bm25s or json with many exception types;
    # whatever the type, the entry is rebuilt rather than the run stopped.
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    if rows_are_passages and retriever.num_passages != num_passages:
        return None, f"it holds {retriever.num_passages} passages, the corpus has {num_passages}"
    return retriever, None


def _discard(final: Path) -> None:
    try:
        discard(final)
    except OSError as e:
        raise RetrievalError(
            f"cannot remove the unusable cached index at {final} ({e}); delete that directory to rebuild it"
        ) from e


def _load_or_build(
    final: Path,
    kind: str,
    params: dict[str, Any],
    num_passages: int,
    *,
    build: Callable[[], _R] | None = None,
    build_into: Callable[[Path], _R] | None = None,
    load: Callable[[Path], _R],
    rows_are_passages: bool = True,
) -> _R:
    """The index cached at `final`, else one made by `build` (then saved) or by `build_into` (which writes its files
    into the directory it is given), cached there for the next run. With `rows_are_passages` false (an index of
    labelled rows, some passages without one) its row count is not compared with the corpus'."""
    if final.is_dir():
        started = time.perf_counter()
        retriever, problem = _load_checked(final, kind, num_passages, load, rows_are_passages)
        if retriever is not None:
            seconds = time.perf_counter() - started
            logger.info("loaded %s index (%d passages) from %s in %.2f s", kind, num_passages, final, seconds)
            return retriever
        logger.warning("cached %s index at %s is unusable (%s); rebuilding it", kind, final, problem)
        _discard(final)

    # Off a terminal no progress bar shows while a large corpus is encoded: say what the wait is for.
    logger.info("building %s index (%d passages)", kind, num_passages)
    started = time.perf_counter()
    # Write next to the final directory, then rename: a reader sees a complete index or none.
    tmp = temp_dir_for(final)
    try:
        if build_into is not None:
            retriever = build_into(tmp)
            seconds = time.perf_counter() - started
        else:
            assert build is not None
            retriever = build()
            seconds = time.perf_counter() - started
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
