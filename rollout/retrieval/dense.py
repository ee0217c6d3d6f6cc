"""Dense index: unit-length encoder vectors in faiss, exact (`IndexFlatIP`), graph (`IndexHNSWFlat`)
or inverted lists (`IndexIVFFlat`, `IndexIVFPQ`; layout in `rollout.retrieval.dense_ivf`).

Inner product of L2-normalised vectors is cosine similarity, so every index type ranks by
cosine; HNSW trades a little recall for speed through `ef_search`, IVF through `nprobe`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from rollout.errors import RetrievalError
from rollout.logs import library_progress_bars_on
from rollout.records import Passage
from rollout.retrieval.base import PAD_INDEX, PAD_SCORE, Hits, check_k, empty_hits, read_index_meta
from rollout.retrieval.batching import BatchSettings, QueryBatcher
from rollout.retrieval.dense_ivf import build_ivf, check_ivf_params, describe_ivf, find_ivf
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.params import DenseParams, check_dense_index

logger = logging.getLogger(__name__)

FAISS_BLAS_THRESHOLD_DEFAULT = int(faiss.cvar.distance_compute_blas_threshold)
"""faiss' own setting (128,000 in faiss 1.15), kept for `bench/retrieval.py` to compare against."""
# faiss scores a batch through BLAS only above this many queries. Through BLAS, flat search
# over 100k x 384 measured 2-5x faster in batches of 16 and 64 on a 2-core machine, and the
# same for single queries (`bench/retrieval.py` prints the ratios).
faiss.cvar.distance_compute_blas_threshold = 1

_FORMAT = "rollout-faiss-dense"
_FORMAT_VERSION = 2
_META = "meta.json"
_INDEX = "index.faiss"
_PROGRESS_MIN_PASSAGES = 1000
"""Show the encoder's progress bar from this many passages on (where progress bars draw: `rollout.logs`)."""
_UNIT_NORM_TOLERANCE = 1e-3
_DEFAULT_PARAMS = DenseParams()

# Tried in order. IO_FLAG_MMAP_IFC maps flat vector storage (Flat, HNSW's storage) and IVF lists
# in place; IO_FLAG_MMAP alone maps only IVF lists. Files neither can map are read into memory.
# Measured with faiss 1.15 (bench/dense_index.py): loading a 1.5 GB IVF file (1M vectors) grows
# RSS by 2 MiB; list and centroid pages count only once a search touches them.
_READ_FLAGS: tuple[int, ...] = tuple(
    getattr(faiss, flag) | faiss.IO_FLAG_READ_ONLY
    for flag in ("IO_FLAG_MMAP_IFC", "IO_FLAG_MMAP")
    if hasattr(faiss, flag)
)


class TextSearch:
    """The text search of a dense index (`DenseRetriever`, or its shards' `ShardedDenseRetriever`): the queries
    encoded in one batch and searched by the index's `search_vectors`, or, with batching, handed to a query batcher
    that shares one encode and search among concurrent calls."""

    encoder: TextEncoder | None
    _batcher: QueryBatcher | None = None

    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits:
        raise NotImplementedError

    def _start_batching(self, batching: BatchSettings | None) -> None:
        if self.encoder is not None and batching is not None and batching.enabled:
            self._batcher = QueryBatcher(self.encoder.encode_queries, self.search_vectors, batching)

    @property
    def batching(self) -> BatchSettings | None:
        """How concurrent text searches are batched; None when each runs alone on its caller's thread."""
        return None if self._batcher is None else self._batcher.settings

    def close(self) -> None:
        """Stop the batching thread, if any; later text searches run alone on their callers' threads."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.close()

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """The k best passages of each query, best first (each call gets its own rows, batched or not)."""
        check_k(k)
        if isinstance(queries, str):
            raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
        if self.encoder is None:
            raise RetrievalError(
                "this dense index has no encoder, so it cannot encode text queries; pass encoder= when "
                "building or loading it, or call search_vectors with precomputed query vectors"
            )
        if len(queries) == 0:
            return empty_hits(0, k)
        batcher = self._batcher
        if batcher is not None:
            return batcher.search(queries, k)
        return self.search_vectors(self.encoder.encode_queries(list(queries)), k)


class DenseRetriever(TextSearch):
    """Cosine search over pre-encoded passages; text queries are encoded on the fly.

    `encoder` may be None for an index searched only through `search_vectors`. With `batching`
    enabled, text searches from concurrent threads are encoded and searched together
    (`rollout.retrieval.batching`); a search made alone is computed exactly as without it.
    """

    name = "dense"

    def __init__(
        self, index: faiss.Index, encoder: TextEncoder | None, *, ef_search: int | None = None,
        nprobe: int | None = None, batching: BatchSettings | None = None,
    ) -> None:
        if encoder is not None and index.d != encoder.dimension:
            raise RetrievalError(
                f"the index holds {index.d}-d vectors but encoder {encoder.model_id!r} makes "
                f"{encoder.dimension}-d ones; use the encoder the index was built with, or rebuild the index"
            )
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise RetrievalError(
                "the faiss index does not use inner-product similarity (metric "
                f"{index.metric_type}); build it with faiss.METRIC_INNER_PRODUCT over L2-normalised vectors"
            )
        self._index = index
        self.encoder = encoder
        self._hnsw = _find_hnsw(index)
        self._ivf = find_ivf(index)
        if ef_search is not None:
            self.ef_search = ef_search
        if nprobe is not None:
            self.nprobe = nprobe
        self._start_batching(batching)

    @classmethod
    def build(
        cls, passages: Sequence[Passage], *, encoder: TextEncoder, params: DenseParams = _DEFAULT_PARAMS
    ) -> DenseRetriever:
        """Encode every passage's contents (title and text) and index the vectors."""
        started = time.perf_counter()
        vectors = encode_corpus(passages, encoder)
        encoded = time.perf_counter()
        retriever = cls.from_vectors(vectors, encoder=encoder, params=params)
        logger.debug(
            "encoded %d passages in %.2f s, built a %s index in %.2f s",
            len(passages), encoded - started, params.index, time.perf_counter() - encoded,
        )
        return retriever

    @classmethod
    def from_vectors(
        cls, vectors: np.ndarray, *, encoder: TextEncoder | None, params: DenseParams = _DEFAULT_PARAMS
    ) -> DenseRetriever:
        """Index precomputed passage vectors (row i = passage i); each row must have unit length."""
        _check_params(params)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] == 0:
            raise RetrievalError(f"expected a non-empty (n_passages, dimension) matrix, got shape {vectors.shape}")
        norms = np.linalg.norm(vectors, axis=1)
        if not np.all(np.abs(norms - 1.0) <= _UNIT_NORM_TOLERANCE):
            worst = int(np.argmax(np.abs(norms - 1.0)))
            raise RetrievalError(
                f"passage vector {worst} has norm {norms[worst]:.4f}; inner product ranks by cosine only for "
                "unit vectors: normalise the rows (faiss.normalize_L2) or encode with normalize_embeddings=True"
            )
        dimension = int(vectors.shape[1])
        if params.index == "ivf":
            index = build_ivf(vectors, params)
        elif params.index == "hnsw":
            index = faiss.IndexHNSWFlat(dimension, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = params.ef_construction
            index.add(vectors)
        else:
            index = faiss.IndexFlatIP(dimension)
            index.add(vectors)
        return cls(index, encoder, **search_settings(params))

    @classmethod
    def from_existing_index(
        cls,
        index_path: str | Path,
        passages: Sequence[Passage],
        *,
        encoder: TextEncoder,
        params: DenseParams = _DEFAULT_PARAMS,
        corpus_path: str | Path | None = None,
    ) -> DenseRetriever:
        """Serve a faiss index file built elsewhere (FlashRAG / Search-R1 layout: row i = passage i).

        The file is memory-mapped read-only where its type allows. A vector count other than
        the number of passages, or a width other than the encoder's, is an error: rows would
        point at the wrong passages. `corpus_path` only names the corpus in error messages.
        """
        index_path = Path(index_path)
        corpus = f"corpus {corpus_path}" if corpus_path is not None else "the corpus"
        if not index_path.is_file():
            raise RetrievalError(
                f"no faiss index file at {index_path}; fix retriever.dense.index_path, or unset it to build "
                "a dense index from the corpus"
            )
        index = _read_index(index_path)
        if index.ntotal != len(passages):
            raise RetrievalError(
                f"faiss index {index_path} holds {index.ntotal} vectors but {corpus} has {len(passages)} "
                "passages; row i of the index must be passage i of the corpus: use the corpus file the index "
                "was built from, or unset retriever.dense.index_path to build an index for this corpus"
            )
        if index.d != encoder.dimension:
            raise RetrievalError(
                f"faiss index {index_path} holds {index.d}-d vectors but encoder {encoder.model_id!r} makes "
                f"{encoder.dimension}-d ones (for {corpus}); set retriever.dense.encoder (and its query_prefix) "
                "to the model that built the index, e.g. intfloat/e5-base-v2 with 'query: '"
            )
        retriever = cls(index, encoder, **search_settings(params))
        logger.debug("serving existing %s index %s", type(faiss.downcast_index(index)).__name__, index_path)
        return retriever

    @property
    def num_passages(self) -> int:
        return int(self._index.ntotal)

    @property
    def faiss_index(self) -> faiss.Index:
        """The faiss index searched (memory-mapped when loaded from a file), e.g. to split it into shards."""
        return self._index

    @property
    def dimension(self) -> int:
        return int(self._index.d)

    @property
    def index_type(self) -> str:
        """"hnsw" for an HNSW graph, "ivf" for inverted lists (flat or PQ codes), else "flat"."""
        if self._hnsw is not None:
            return "hnsw"
        return "ivf" if self._ivf is not None else "flat"

    @property
    def ef_search(self) -> int | None:
        """HNSW search breadth (higher = better recall, slower); None for other index types."""
        return None if self._hnsw is None else int(self._hnsw.hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise RetrievalError(f"ef_search must be a positive integer, got {value!r}; the default is 128")
        if self._hnsw is not None:
            self._hnsw.hnsw.efSearch = int(value)

    @property
    def nprobe(self) -> int | None:
        """IVF lists scanned per query (higher = better recall, slower; capped at nlist); None for other types."""
        return None if self._ivf is None else int(self._ivf.nprobe)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise RetrievalError(f"ivf_nprobe must be a positive integer, got {value!r}; the default is 32")
        if self._ivf is not None:
            self._ivf.nprobe = int(value)


    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits:
        """Rank passages for precomputed query vectors (float32 (n, dimension), unit rows)."""
        check_k(k)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise RetrievalError(
                f"query vectors must have shape (n_queries, {self.dimension}), got {vectors.shape}; "
                "encode them with the encoder that built the index"
            )
        hits = empty_hits(len(vectors), k)
        take = min(k, self.num_passages)
        if len(vectors) == 0 or take == 0:
            return hits
        scores, indices = self._index.search(vectors, take)
        # HNSW may find fewer than `take` rows; faiss marks them -1 beside -FLT_MAX.
        missing = indices < 0
        indices[missing] = PAD_INDEX
        scores[missing] = PAD_SCORE
        hits.indices[:, :take] = indices
        hits.scores[:, :take] = scores
        return hits

    def save(self, path: Path) -> None:
        """Write the faiss index and a small JSON description into directory `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(path / _INDEX))
        meta: dict[str, Any] = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "index": self.index_type,
            "model_id": None if self.encoder is None else self.encoder.model_id,
            "passage_prefix": None if self.encoder is None else self.encoder.passage_prefix,
            "dimension": self.dimension,
            "num_passages": self.num_passages,
        }
        if self._hnsw is not None:
            meta["hnsw_m"] = int(self._hnsw.hnsw.nb_neighbors(1))
            meta["ef_construction"] = int(self._hnsw.hnsw.efConstruction)
        if self._ivf is not None:
            meta.update(describe_ivf(self._ivf))
        (path / _META).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(
        cls, path: Path, *, encoder: TextEncoder | None, params: DenseParams = _DEFAULT_PARAMS
    ) -> DenseRetriever:
        """Read a directory written by `save` (memory-mapped); `params.ef_search` applies to HNSW, `ivf_nprobe` to IVF."""
        path = Path(path)
        meta = read_index_meta(path, _META, fmt=_FORMAT, version=_FORMAT_VERSION, what="dense index",
                               builder="DenseRetriever.build")
        built_with = (meta.get("model_id"), meta.get("passage_prefix"))
        querying_with = None if encoder is None else (encoder.model_id, encoder.passage_prefix)
        # An index built from precomputed vectors records no model, so there is nothing to compare.
        if querying_with is not None and built_with[0] is not None and built_with != querying_with:
            # Same weights can sit at another path, so this is not fatal; the width check is.
            logger.warning(
                "dense index at %s was built with model %r (passage prefix %r), querying with %r (prefix %r)",
                path, *built_with, *querying_with,
            )
        index = _read_index(path / _INDEX)
        if index.ntotal != meta.get("num_passages") or index.d != meta.get("dimension"):
            raise RetrievalError(
                f"dense index at {path} holds {index.ntotal} {index.d}-d vectors, its {_META} says "
                f"{meta.get('num_passages')} {meta.get('dimension')}-d ones; delete it and rebuild"
            )
        return cls(index, encoder, **search_settings(params))


def encode_corpus(passages: Sequence[Passage], encoder: TextEncoder) -> np.ndarray:
    """Every passage's contents (title and text) as one unit row, in passage order."""
    if len(passages) == 0:
        raise RetrievalError("cannot build a dense index over an empty corpus; pass at least one passage")
    vectors = encoder.encode_passages(
        [p.contents for p in passages],
        show_progress=len(passages) >= _PROGRESS_MIN_PASSAGES and library_progress_bars_on(),
    )
    if vectors.shape != (len(passages), encoder.dimension):
        raise RetrievalError(
            f"encoder {encoder.model_id!r} returned shape {vectors.shape} for {len(passages)} passages; "
            f"expected ({len(passages)}, {encoder.dimension})"
        )
    return vectors


def search_settings(params: DenseParams) -> dict[str, Any]:
    """The constructor's search-time settings: what a loaded or built index searches with."""
    return {"ef_search": params.ef_search, "nprobe": params.ivf_nprobe, "batching": _batching(params)}


def _batching(params: DenseParams) -> BatchSettings:
    return BatchSettings.from_params(params.max_query_batch, params.batch_wait_ms)


def _check_params(params: DenseParams) -> None:
    check_dense_index(params.index)
    check_ivf_params(params)
    for field in ("hnsw_m", "ef_construction", "ef_search"):
        value = getattr(params, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RetrievalError(f"retriever.dense.{field}={value!r}: use a positive integer")


def _read_index(path: Path) -> faiss.Index:
    """Memory-map the file read-only where faiss can, else read it into memory."""
    for flags in _READ_FLAGS:
        try:
            return faiss.read_index(str(path), flags)
        except RuntimeError as e:
            logger.debug("cannot map %s with io flags %#x (%s)", path, flags, e)
    try:
        return faiss.read_index(str(path))
    except RuntimeError as e:
        raise RetrievalError(f"cannot read faiss index {path} ({e}); check that it is a faiss index file") from e


def _find_hnsw(index: faiss.Index) -> faiss.IndexHNSW | None:
    """The HNSW index inside `index` (itself, or wrapped in an id map or transform), if any."""
    index = faiss.downcast_index(index)
    while True:
        if isinstance(index, faiss.IndexHNSW):
            return index
        inner = getattr(index, "index", None)
        if not isinstance(index, (faiss.IndexIDMap, faiss.IndexPreTransform)) or inner is None:
            return None
        index = faiss.downcast_index(inner)
