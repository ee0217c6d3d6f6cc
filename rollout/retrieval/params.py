"""Index parameters: one typed record per retriever, filled from `conf/retriever/`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from rollout.errors import RetrievalError

ENCODER_BACKENDS: tuple[str, ...] = ("torch", "onnx", "onnx-int8")
"""`retriever.dense.backend` choices: sentence-transformers on torch, or its ONNX export (float32 or int8 weights)."""


def check_encoder_backend(backend: object) -> None:
    """Raise a RetrievalError naming the choices unless `backend` is one of `ENCODER_BACKENDS`."""
    if backend not in ENCODER_BACKENDS:
        raise RetrievalError(
            f"retriever.dense.backend={backend!r} is not an encoder backend; choose one of {list(ENCODER_BACKENDS)}"
        )


DENSE_INDEX_KINDS: tuple[str, ...] = ("flat", "hnsw", "ivf")
"""Values of `retriever.dense.index`."""


def check_dense_index(index: object) -> None:
    """One error naming the choices for an unknown `retriever.dense.index`."""
    if index not in DENSE_INDEX_KINDS:
        choices = ", ".join(DENSE_INDEX_KINDS[:-1]) + " or " + DENSE_INDEX_KINDS[-1]
        raise RetrievalError(f"retriever.dense.index={index!r}: use {choices}")


@dataclass(frozen=True, slots=True)
class SparseParams:
    """BM25 settings; both backends give the same scores for the same settings."""

    backend: Literal["bm25s", "rank_bm25"] = "bm25s"
    """`bm25s` (fast, default) or `rank_bm25` (the reference implementation)."""
    k1: float = 1.5
    b: float = 0.75
    stopwords: bool = True
    """Drop English stopwords when tokenizing."""
    stemming: bool = False
    """Snowball-stem English tokens (PyStemmer)."""
    index_path: str | None = None
    """A Pyserini Lucene index to search instead (`rollout.retrieval.lucene`); k1 and b go to its BM25 as given."""
    build_memory_mb: int = 2048
    """What building the index may hold in memory, the building process and its tokenizing workers together
    (`rollout.retrieval.bm25_build`); changes no score."""


@dataclass(frozen=True, slots=True)
class DenseParams:
    """Encoder and faiss index settings."""

    encoder: str | None = None
    """sentence-transformers model name or path; None = bundled all-MiniLM-L6-v2."""
    query_prefix: str = ""
    passage_prefix: str = ""
    backend: Literal["torch", "onnx", "onnx-int8"] = "onnx"
    """Who computes the vectors: `onnx` (sentence-transformers' model exported to float32 ONNX, run by
    onnxruntime, no torch at query time), `torch` (sentence-transformers itself) or `onnx-int8` (int8
    weights). `onnx` is the default: the fastest whose recall@10 against torch stays at least 0.99
    (bench/encoder_backends.py). Backends give slightly different vectors, so this is part of the run's
    identity and of the dense index's cache key."""
    index: Literal["flat", "hnsw", "ivf"] = "flat"
    """`flat` (exact inner product), `hnsw` (approximate graph search) or `ivf` (inverted lists, optionally PQ)."""
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    ivf_nlist: int | None = None
    """Inverted lists of `ivf`; None = about 4 x sqrt(passages), at most one list per 39 passages."""
    ivf_nprobe: int = 32
    """Lists `ivf` scans per query (higher = better recall, slower); set at search time, like ef_search."""
    ivf_pq_m: int = 0
    """0 = IVFFlat (full vectors); m > 0 = IVFPQ, each vector stored as m codes of 8 bits (m divides the width)."""
    index_path: str | None = None
    """An existing faiss index whose row i is line i of the corpus (FlashRAG / Search-R1 layout)."""
    batch_size: int = 64
    """Passages per encoder batch when building."""
    max_query_batch: int = 16
    """Most concurrent queries encoded together and searched in one faiss call; 1 = each alone. Speed only."""
    batch_wait_ms: float = 2.0
    """Longest the batcher waits for the queries it expects (as many as its last batch held). Speed only."""


@dataclass(frozen=True, slots=True)
class HybridParams:
    """Reciprocal-rank fusion of dense and sparse rankings."""

    rrf_k: int = 60
    """score = sum over retrievers of 1 / (rrf_k + rank)."""
    candidates: int = 50
    """How deep each retriever ranks before fusion (at least the requested k)."""


@dataclass(frozen=True, slots=True)
class RetrievalParams:
    """All index parameters of a run."""

    dense: DenseParams = field(default_factory=DenseParams)
    sparse: SparseParams = field(default_factory=SparseParams)
    hybrid: HybridParams = field(default_factory=HybridParams)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RetrievalParams:
        """From the `retriever` config section; unknown keys are an error naming the valid ones."""
        data = dict(data or {})
        parts: dict[str, Any] = {}
        for name, kind in (("dense", DenseParams), ("sparse", SparseParams), ("hybrid", HybridParams)):
            section = dict(data.get(name) or {})
            valid = {f.name for f in fields(kind)}
            unknown = sorted(set(section) - valid)
            if unknown:
                raise RetrievalError(
                    f"unknown retriever.{name} setting(s) {unknown}; valid: {sorted(valid)}"
                )
            parts[name] = kind(**section)
        params = cls(**parts)
        if params.sparse.backend not in ("bm25s", "rank_bm25"):
            raise RetrievalError(f"retriever.sparse.backend={params.sparse.backend!r}: use bm25s or rank_bm25")
        check_encoder_backend(params.dense.backend)
        check_dense_index(params.dense.index)
        return params

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
