"""A dense index in S shards: contiguous row ranges, each its own faiss index, searched side by side and merged.

Shard i holds rows [start_i, stop_i) of the whole index (`shard_ranges`: about n / S rows each, cut on faiss' BLAS
blocks so that flat scores are bit for bit the whole index's).
A query goes to every shard; each answers its own top k, with its rows mapped back to global ones (start + r, or
the labels of an id-mapped index), and `merge_hits` keeps the k highest of the S x k by score, ties to the lower
global row. Scores are inner products of the same unit vectors whichever shard holds a row, so they compare across
shards as they are: flat shards give exactly the unsharded answer. An HNSW or IVF index is built per shard (IVF's
lists by the same rule on the shard's rows), so its approximation is each shard's, and changes with S.

On disk a sharded index is one folder: `meta.json` (the ranges) and one `DenseRetriever.save` folder per shard
(`shard-000`, ...), each memory-mapped on load like any cached dense index. `split_index_into` writes the shards of an
existing flat index (an `index_path` file, or the flat index read from Tevatron shards), one shard in memory at a
time; `build_shards_into` builds them from vectors. The searchers are local here; `ShardedDenseRetriever` takes any
objects with `search_vectors(vectors, k) -> Hits` in global rows, so shards served on Ray Serve
(`rollout.retrieval.dense_serve`) merge the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import faiss
import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval.base import PAD_INDEX, Hits, check_k, empty_hits, read_index_meta
from rollout.retrieval.batching import BatchSettings
from rollout.retrieval.dense import DenseRetriever, TextSearch, search_settings
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.params import DenseParams

logger = logging.getLogger(__name__)

_FORMAT = "rollout-faiss-dense-shards"
_FORMAT_VERSION = 1
_META = "meta.json"
_SPLIT_CHUNK_ROWS = 65_536
"""Rows copied at a time when an existing index is split (the shard being written is in memory, not the source)."""


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """The S contiguous [start, stop) row ranges of n rows, about n / S each, every boundary a multiple of faiss'
    BLAS database block (1,024 rows) where n allows it.

    faiss scores a flat index 1,024 rows per BLAS call, and BLAS rounds a row's score by where it sits in the block
    it is given (measured: a boundary at 2,500 of 5,000 moved 1-ulp differences into the scores of rows near it).
    With aligned boundaries every shard's BLAS calls are calls the whole index makes, so scores are bit for bit the
    unsharded ones. An index too small to align (under about S x 1,024 rows) is cut evenly; its scores then agree
    with the unsharded ones to float32 rounding (1e-7).
    """
    check_shard_count(shards, n)
    block = max(1, int(faiss.cvar.distance_compute_blas_database_bs))
    bounds = [round(i * n / shards / block) * block for i in range(shards)] + [n]
    if any(stop <= start for start, stop in zip(bounds, bounds[1:], strict=False)):
        bounds = [i * n // shards for i in range(shards)] + [n]
    return list(zip(bounds, bounds[1:], strict=False))


def check_shard_count(shards: int, n: int) -> None:
    """One error naming the fix for S shards of an index of n rows (each shard holds at least one row)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise RetrievalError(f"retriever.dense.shards={shards!r} must be a positive integer")
    if shards > n:
        raise RetrievalError(f"retriever.dense.shards={shards} is more shards than the dense index has rows ({n}); "
                             f"set retriever.dense.shards to at most {n}")


def merge_hits(parts: Sequence[Hits], k: int) -> Hits:
    """The k best of each query's rows over all shards' answers (global rows): highest score first, ties to the
    lower row, padding (-1, -inf) last."""
    check_k(k)
    if not parts:
        raise RetrievalError("no shard answered; a sharded index has at least one shard")
    indices = np.concatenate([p.indices for p in parts], axis=1)
    scores = np.concatenate([p.scores for p in parts], axis=1)
    hits = empty_hits(len(indices), k)
    if len(indices) == 0:
        return hits
    # Padding sorts after every real row: its score is -inf, and its row (-1) is moved past every real one.
    rows = np.where(indices == PAD_INDEX, np.iinfo(np.int64).max, indices)
    order = np.lexsort((rows, -scores), axis=-1)[:, :k]
    take = order.shape[1]
    hits.indices[:, :take] = np.take_along_axis(indices, order, axis=1)
    hits.scores[:, :take] = np.take_along_axis(scores, order, axis=1)
    return hits


class ShardUnavailable(RetrievalError):
    """A shard served elsewhere did not answer: an infrastructure failure, and the whole search fails with it."""


class ShardSearcher(Protocol):
    """One shard, wherever it is searched: its top k for query vectors, rows already global."""

    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits: ...


class LocalShard:
    """A shard searched in this process: a memory-mapped `DenseRetriever` whose local row r is global row
    `offset + r` (offset 0 for an id-mapped index, whose labels are global rows already)."""

    def __init__(self, retriever: DenseRetriever, offset: int) -> None:
        self.retriever = retriever
        self.offset = offset

    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits:
        hits = self.retriever.search_vectors(vectors, k)
        if self.offset:
            hits.indices[hits.indices != PAD_INDEX] += self.offset
        return hits


class ShardedDenseRetriever(TextSearch):
    """Cosine search over S shards: queries encoded once, every shard searched (on threads of its own: faiss
    releases the GIL), each query's top k merged exactly. Concurrent text searches are batched as
    `DenseRetriever`'s are."""

    name = "dense"

    def __init__(self, shards: Sequence[ShardSearcher], encoder: TextEncoder | None, *, num_passages: int,
                 dimension: int, index_type: str, batching: BatchSettings | None = None) -> None:
        if not shards:
            raise RetrievalError("a sharded dense index needs at least one shard")
        if encoder is not None and dimension != encoder.dimension:
            raise RetrievalError(f"the sharded index holds {dimension}-d vectors but encoder {encoder.model_id!r} "
                                 f"makes {encoder.dimension}-d ones; use the encoder the index was built with")
        self.shards = list(shards)
        self.encoder = encoder
        self.num_passages = num_passages
        self.dimension = dimension
        self.index_type = index_type
        self.folder: Path | None = None
        """The cache entry the shards were loaded from (None for shards given otherwise)."""
        self._pool = ThreadPoolExecutor(max_workers=len(self.shards), thread_name_prefix="dense-shard")
        self._start_batching(batching)

    def close(self) -> None:
        """Stop the batching thread and the shards' threads."""
        super().close()
        self._pool.shutdown(wait=False)

    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits:
        """Every shard's top k for the query vectors, merged; a shard that fails fails the whole search."""
        check_k(k)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise RetrievalError(f"query vectors must have shape (n_queries, {self.dimension}), got {vectors.shape}")
        if len(vectors) == 0:
            return empty_hits(0, k)
        if len(self.shards) == 1:
            return merge_hits([self.shards[0].search_vectors(vectors, k)], k)
        futures = [self._pool.submit(shard.search_vectors, vectors, k) for shard in self.shards]
        return merge_hits([f.result() for f in futures], k)


def build_shards_into(folder: Path, rows_of: Callable[[int, int], np.ndarray], n: int, *, encoder: TextEncoder,
                      params: DenseParams) -> ShardedDenseRetriever:
    """Build S = `params.shards` indexes of `params.index`'s kind, shard i over `rows_of(start_i, stop_i)` (unit
    vectors), into `folder`; open them from there."""
    ranges = shard_ranges(n, params.shards)
    for number, (start, stop) in enumerate(ranges):
        shard = DenseRetriever.from_vectors(rows_of(start, stop), encoder=None, params=params)
        shard.save(folder / shard_dir(number))
        logger.debug("shard %d/%d: rows %d to %d, %s index", number + 1, len(ranges), start, stop, params.index)
    write_shards_meta(folder, ranges, encoder, index=params.index, dimension=encoder.dimension, labelled=False)
    return load_shards(folder, encoder=encoder, params=params)


def split_index_into(folder: Path, index: faiss.Index, source: str, *, encoder: TextEncoder,
                     params: DenseParams) -> ShardedDenseRetriever:
    """Write the S = `params.shards` row ranges of an existing flat index (plain, or id-mapped as Tevatron's) into
    `folder`, one shard in memory at a time; open them from there. `source` names the index in errors."""
    index = faiss.downcast_index(index)
    labels = None
    inner = index
    if isinstance(index, faiss.IndexIDMap):
        labels = faiss.vector_to_array(index.id_map).astype(np.int64)
        inner = faiss.downcast_index(index.index)
    if not isinstance(inner, faiss.IndexFlat):
        raise RetrievalError(
            f"retriever.dense.shards={params.shards} splits a flat index row by row, and {source} is a "
            f"{type(inner).__name__}; give a flat (IndexFlatIP) file, or unset retriever.dense.index_path so rollout "
            "builds each shard's index from the corpus (retriever.dense.index=ivf or hnsw), or set "
            "retriever.dense.shards=1")
    n, d = int(inner.ntotal), int(inner.d)
    ranges = shard_ranges(n, params.shards)
    logger.info("splitting %s (%d rows) into %d shards (once; later runs load them from the cache)", source, n,
                len(ranges))
    for number, (start, stop) in enumerate(ranges):
        flat = faiss.IndexFlatIP(d)
        shard = flat if labels is None else faiss.IndexIDMap(flat)
        for at in range(start, stop, _SPLIT_CHUNK_ROWS):
            upto = min(stop, at + _SPLIT_CHUNK_ROWS)
            rows = inner.reconstruct_n(at, upto - at)
            if labels is None:
                shard.add(rows)
            else:
                shard.add_with_ids(rows, labels[at:upto])
        DenseRetriever(shard, None).save(folder / shard_dir(number))
        del shard, flat
    write_shards_meta(folder, ranges, encoder, index="flat", dimension=d, labelled=labels is not None)
    return load_shards(folder, encoder=encoder, params=params)


def load_shards(folder: Path, *, encoder: TextEncoder | None, params: DenseParams) -> ShardedDenseRetriever:
    """The shards `build_shards_into` or `split_index_into` wrote, each memory-mapped, searched side by side."""
    meta = read_shards_meta(folder)
    shards = []
    for number, entry in enumerate(meta["shards"]):
        retriever = DenseRetriever.load(folder / shard_dir(number), encoder=None, params=params)
        if retriever.num_passages != entry["stop"] - entry["start"]:
            raise RetrievalError(f"shard {number} at {folder} holds {retriever.num_passages} rows, its {_META} says "
                                 f"{entry['stop'] - entry['start']}; delete the folder and rebuild")
        shards.append(LocalShard(retriever, 0 if meta["labelled"] else int(entry["start"])))
    retriever = ShardedDenseRetriever(shards, encoder, num_passages=int(meta["num_passages"]),
                                      dimension=int(meta["dimension"]), index_type=str(meta["index"]),
                                      batching=search_settings(params)["batching"])
    retriever.folder = Path(folder)
    return retriever


def read_shards_meta(folder: Path) -> dict[str, Any]:
    """The `meta.json` of a sharded index folder, checked."""
    return read_index_meta(folder, _META, fmt=_FORMAT, version=_FORMAT_VERSION, what="sharded dense index",
                           builder="rollout.retrieval.dense_shards.build_shards_into")


def shard_dir(number: int) -> str:
    return f"shard-{number:03d}"


def write_shards_meta(folder: Path, ranges: list[tuple[int, int]], encoder: TextEncoder, *, index: str,
                      dimension: int, labelled: bool) -> None:
    """The `meta.json` of a sharded index whose shard folders (`shard_dir`) hold `ranges` in order."""
    meta = {
        "format": _FORMAT, "format_version": _FORMAT_VERSION, "index": index, "model_id": encoder.model_id,
        "passage_prefix": encoder.passage_prefix, "dimension": dimension, "num_passages": ranges[-1][1],
        "labelled": labelled, "shards": [{"start": start, "stop": stop} for start, stop in ranges],
    }
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / _META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
