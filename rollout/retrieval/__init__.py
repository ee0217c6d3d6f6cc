"""Dense (sentence-transformers + faiss), sparse (BM25) and hybrid (RRF) retrieval over a passage list.

Every retriever implements `Retriever.search(queries, k) -> Hits`, where `Hits.indices` are
row numbers into the passage list the index was built from. `load_or_build_indexes` caches
indexes on disk keyed by corpus content and the parameters that shape them.
"""

# Must come first: it sets OpenMP's wait policy before faiss or torch load (see the module).
from rollout.errors import RetrievalError
from rollout.retrieval import _threads  # noqa: F401
from rollout.retrieval.base import Hits, Retriever
from rollout.retrieval.cache import load_or_build_indexes
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.encoder import Encoder, TextEncoder
from rollout.retrieval.hybrid import HybridRetriever
from rollout.retrieval.params import DenseParams, HybridParams, RetrievalParams, SparseParams
from rollout.retrieval.sparse import BM25Retriever
from rollout.retrieval.tokenizer import tokenize

__all__ = [
    "BM25Retriever",
    "DenseParams",
    "DenseRetriever",
    "Encoder",
    "Hits",
    "HybridParams",
    "HybridRetriever",
    "RetrievalError",
    "RetrievalParams",
    "Retriever",
    "SparseParams",
    "TextEncoder",
    "load_or_build_indexes",
    "tokenize",
]
