"""Dense (sentence-transformers + faiss) and sparse (BM25) retrieval over a passage list.

Every index implements `Retriever.search(queries, k) -> Hits`, where `Hits.indices` are row
numbers into the passage list the index was built from. `load_or_build_indexes` caches
indexes on disk keyed by corpus content and parameters.
"""

from rollout.retrieval.base import Hits, Retriever
from rollout.retrieval.cache import load_or_build_indexes
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.encoder import Encoder, TextEncoder
from rollout.retrieval.errors import RetrievalError
from rollout.retrieval.sparse import BM25Retriever
from rollout.retrieval.tokenizer import tokenize

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "Encoder",
    "Hits",
    "RetrievalError",
    "Retriever",
    "TextEncoder",
    "load_or_build_indexes",
    "tokenize",
]
