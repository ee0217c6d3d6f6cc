"""Dense index: encoder vectors in a faiss IndexFlatIP (inner product of unit vectors = cosine)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from rollout.data.records import Passage
from rollout.retrieval.base import Hits, check_k, empty_hits
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.errors import RetrievalError

logger = logging.getLogger(__name__)

# faiss only uses BLAS for batches above this many queries (default 20); on this 2-core
# machine flat search of small batches is ~10x faster through BLAS.
faiss.cvar.distance_compute_blas_threshold = 1

_FORMAT = "rollout-faiss-flat-ip"
_FORMAT_VERSION = 1
_META = "meta.json"
_INDEX = "index.faiss"


class DenseRetriever:
    """Exact cosine search: queries encoded on the fly, passages pre-encoded in a flat index."""

    name = "dense"

    def __init__(self, index: faiss.Index, encoder: TextEncoder) -> None:
        if index.d != encoder.dimension:
            raise RetrievalError(
                f"the index holds {index.d}-d vectors but encoder {encoder.model_id!r} makes "
                f"{encoder.dimension}-d ones; use the encoder the index was built with, or rebuild the index"
            )
        self._index = index
        self.encoder = encoder

    @classmethod
    def build(cls, passages: Sequence[Passage], *, encoder: TextEncoder) -> DenseRetriever:
        """Encode every passage's contents and add the vectors to a new flat index."""
        if len(passages) == 0:
            raise RetrievalError("cannot build a dense index over an empty corpus; pass at least one passage")
        vectors = encoder.encode_passages([p.contents for p in passages])
        if vectors.shape != (len(passages), encoder.dimension):
            raise RetrievalError(
                f"encoder {encoder.model_id!r} returned shape {vectors.shape} for {len(passages)} passages; "
                f"expected ({len(passages)}, {encoder.dimension})"
            )
        index = faiss.IndexFlatIP(encoder.dimension)
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        return cls(index, encoder)

    @property
    def num_passages(self) -> int:
        return int(self._index.ntotal)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Return the k passages with the highest cosine similarity to each query."""
        check_k(k)
        if isinstance(queries, str):
            raise RetrievalError("queries must be a sequence of strings; wrap a single query in a list")
        hits = empty_hits(len(queries), k)
        take = min(k, self.num_passages)
        if len(queries) == 0 or take == 0:
            return hits
        vectors = np.ascontiguousarray(self.encoder.encode_queries(list(queries)), dtype=np.float32)
        scores, indices = self._index.search(vectors, take)
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
            "model_id": self.encoder.model_id,
            "passage_prefix": self.encoder.passage_prefix,
            "dimension": int(self._index.d),
            "num_passages": self.num_passages,
        }
        (path / _META).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path, *, encoder: TextEncoder) -> DenseRetriever:
        """Read a directory written by `save`; `encoder` must be the model that built it."""
        path = Path(path)
        meta_path = path / _META
        if not meta_path.is_file():
            raise RetrievalError(
                f"no dense index at {path} ({_META} missing); build one with DenseRetriever.build(...).save(path)"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT or meta.get("format_version") != _FORMAT_VERSION:
            raise RetrievalError(
                f"{path} holds format {meta.get('format')!r} v{meta.get('format_version')}, this code reads "
                f"{_FORMAT!r} v{_FORMAT_VERSION}; delete the directory and rebuild the index"
            )
        if meta.get("model_id") != encoder.model_id or meta.get("passage_prefix") != encoder.passage_prefix:
            # Same weights can sit at another path, so this is not fatal; the width check below is.
            logger.warning(
                "dense index at %s was built with model %r (passage prefix %r), querying with %r (prefix %r)",
                path, meta.get("model_id"), meta.get("passage_prefix"), encoder.model_id, encoder.passage_prefix,
            )
        index = faiss.read_index(str(path / _INDEX))
        if index.ntotal != meta.get("num_passages"):
            raise RetrievalError(f"dense index at {path} is inconsistent with its {_META}; delete it and rebuild")
        return cls(index, encoder)
