"""Dense (sentence-transformers + faiss), sparse (BM25) and hybrid (RRF) retrieval over a passage list.

Every retriever implements `Retriever.search(queries, k) -> Hits`, where `Hits.indices` are
row numbers into the passage list the index was built from. `load_or_build_indexes` caches
indexes on disk keyed by corpus content and the parameters that shape them.
"""

# Must come first: it sets OpenMP's wait policy before faiss or torch load (see the module).
from rollout.retrieval import _threads  # noqa: F401, I001

import importlib
from typing import Any

# Loaded on first use: faiss, bm25s and numba take half a second to import, and the run's driver, which
# only reads the index parameters (`rollout.retrieval.params`), never searches.
_EXPORTS = {
    "BM25Retriever": "sparse",
    "DenseParams": "params",
    "DenseRetriever": "dense",
    "Encoder": "encoder",
    "Hits": "base",
    "HybridParams": "params",
    "HybridRetriever": "hybrid",
    "RetrievalError": None,
    "RetrievalParams": "params",
    "Retriever": "base",
    "SparseParams": "params",
    "TextEncoder": "encoder",
    "load_or_build_indexes": "cache",
    "tokenize": "tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}" if module else "rollout.errors"), name)
    globals()[name] = value
    return value
