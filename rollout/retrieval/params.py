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


POOLING_MODES: dict[str, str] = {"cls": "cls", "last": "lasttoken", "max": "max", "mean": "mean"}
"""`retriever.dense.pooling` choices and the sentence-transformers pooling mode each names; `last` is the last real
token's hidden state (Qwen3-Embedding's, Tevatron's `eos`)."""


def check_pooling(pooling: object) -> None:
    """One error naming the choices for an unknown `retriever.dense.pooling` (None keeps the model's own)."""
    if pooling is not None and pooling not in POOLING_MODES:
        raise RetrievalError(
            f"retriever.dense.pooling={pooling!r} is not a pooling mode; choose one of {list(POOLING_MODES)}, "
            "or null for the pooling the model's own sentence-transformers config names"
        )


def check_dense_source(params: DenseParams) -> None:
    """One error for settings that name two sources of the dense index, or shards with an index kind they lack."""
    if params.tevatron_shards is None:
        return
    if params.index_path is not None:
        raise RetrievalError(
            "retriever.dense.index_path and retriever.dense.tevatron_shards both name the dense index; set only one"
        )
    if params.index != "flat":
        raise RetrievalError(
            f"retriever.dense.tevatron_shards is read into an exact (flat) index, as BrowseComp-Plus searches it; "
            f"leave retriever.dense.index=flat (it is {params.index!r})"
        )


def check_dense_shards(params: DenseParams) -> None:
    """One error naming the fix for a `retriever.dense.shards` that is not a positive integer, or Serve settings
    out of range."""
    shards = params.shards
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise RetrievalError(f"retriever.dense.shards={shards!r} must be a positive integer: 1 serves the dense index "
                             "whole, S > 1 splits it into S row ranges")
    replicas, cpus = params.serve_replicas, params.serve_cpus
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise RetrievalError(f"retriever.dense.serve_replicas={replicas!r} must be a positive integer (replicas of "
                             "each shard's Ray Serve deployment)")
    if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not 0 <= cpus < float("inf"):
        raise RetrievalError(f"retriever.dense.serve_cpus={cpus!r} must be a non-negative number of CPUs")
    timeout = params.serve_timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise RetrievalError(f"retriever.dense.serve_timeout_s={timeout!r} must be a positive number of seconds")
    if not isinstance(params.serve, bool):
        raise RetrievalError(f"retriever.dense.serve={params.serve!r}: use true or false")
    if params.serve and params.passage_tokens is not None:
        raise RetrievalError("retriever.dense.serve=true serves an index of corpus rows, and retriever.dense."
                             "passage_tokens cuts them into passages; set retriever.dense.passage_tokens=null, or "
                             "retriever.dense.serve=false")


def check_pruning(pruning: object) -> None:
    """One error naming the choices for `retriever.sparse.pruning`."""
    if pruning not in ("on", "off"):
        raise RetrievalError(f"retriever.sparse.pruning={pruning!r}: use on (skip passages that cannot enter the top "
                             "k) or off (score every posting); the results are the same")


DENSE_INDEX_KINDS: tuple[str, ...] = ("flat", "hnsw", "ivf")
"""Values of `retriever.dense.index`."""


def check_dense_index(index: object) -> None:
    """One error naming the choices for an unknown `retriever.dense.index`."""
    if index not in DENSE_INDEX_KINDS:
        choices = ", ".join(DENSE_INDEX_KINDS[:-1]) + " or " + DENSE_INDEX_KINDS[-1]
        raise RetrievalError(f"retriever.dense.index={index!r}: use {choices}")


def check_passages(params: DenseParams) -> None:
    """One error naming the fix for passages that cannot be cut (`passage_tokens`, `passage_overlap`), or that
    would be cut for an index rollout does not build (its rows are the corpus' rows)."""
    tokens, overlap = params.passage_tokens, params.passage_overlap
    if tokens is None:
        return
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise RetrievalError(f"retriever.dense.passage_tokens={tokens!r} must be a positive integer, or null to "
                             "encode each corpus row whole")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < tokens:
        raise RetrievalError(f"retriever.dense.passage_overlap={overlap!r} must be an integer from 0 to "
                             f"passage_tokens - 1 (= {tokens - 1})")
    given = [name for name in ("index_path", "tevatron_shards") if getattr(params, name) is not None]
    if given:
        raise RetrievalError(f"retriever.dense.passage_tokens={tokens} cuts passages for an index rollout encodes, and "
                             f"retriever.dense.{given[0]} names one already made (one vector per corpus row); set "
                             "retriever.dense.passage_tokens=null")


SPARSE_METHODS: tuple[str, ...] = ("robertson", "lucene")
"""`retriever.sparse.method` choices: the idf of the built-in BM25."""


def check_sparse_method(method: object) -> None:
    """One error naming the choices for an unknown `retriever.sparse.method`."""
    if method not in SPARSE_METHODS:
        raise RetrievalError(
            f"retriever.sparse.method={method!r} is not a BM25 idf; use robertson (rank_bm25's, 0 for words in over "
            "half the passages) or lucene (Lucene's and Pyserini's, never 0)"
        )


@dataclass(frozen=True, slots=True)
class SparseParams:
    """BM25 settings; both backends give the same scores for the same settings."""

    backend: Literal["bm25s", "rank_bm25"] = "bm25s"
    """`bm25s` (fast, default) or `rank_bm25` (the reference implementation)."""
    k1: float = 1.5
    b: float = 0.75
    method: Literal["robertson", "lucene"] = "robertson"
    """The built-in BM25's idf (one of `SPARSE_METHODS`): `robertson`, max(0, log((N - df + 0.5) / (df + 0.5))), 0 for
    a word in more than half the passages; `lucene`, log(1 + (N - df + 0.5) / (df + 0.5)), never 0 (Lucene's
    BM25Similarity, Pyserini's). Both keep Okapi's (k1 + 1) in the tf part, which scales every score alike. With
    `index_path` it does not apply: Lucene scores with its own idf. Part of the index's cache key and the run's
    identity."""
    stopwords: bool = True
    """Drop English stopwords when tokenizing."""
    stemming: bool = False
    """Snowball-stem English tokens (PyStemmer)."""
    index_path: str | None = None
    """A Pyserini Lucene index to search instead (`rollout.retrieval.lucene`); k1 and b go to its BM25 as given."""
    build_memory_mb: int = 2048
    """What building the index may hold in memory, the building process and its tokenizing workers together
    (`rollout.retrieval.bm25_build`); changes no score."""
    pruning: Literal["on", "off"] = "on"
    """`on`: skip the passages that cannot enter the top k (`rollout.retrieval.bm25_pruned`); `off`: score every
    posting of every query term. The same hits and scores either way; speed only."""


@dataclass(frozen=True, slots=True)
class DenseParams:
    """Encoder and faiss index settings."""

    encoder: str | None = None
    """sentence-transformers model name or path; None = bundled all-MiniLM-L6-v2."""
    query_prefix: str = ""
    """Text put before each query: an instruction for models trained with one (e5's "query: ", Qwen3-Embedding's
    "Instruct: ...\\nQuery:"), joined to the query with nothing between."""
    passage_prefix: str = ""
    pooling: str | None = None
    """How token vectors become one vector: None = as the model's sentence-transformers config says (mean for a
    plain Hugging Face model), or one of `POOLING_MODES` (`last` for Qwen3-Embedding). Changes every vector, so
    it is part of the run's identity and of a built index's cache key."""
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
    tevatron_shards: str | None = None
    """A glob of Tevatron's pickled `(vectors, docids)` shards (BrowseComp-Plus' prebuilt Qwen3-Embedding indexes),
    read once into the cache's flat index (`rollout.retrieval.tevatron_shards`). Unpickling can run code: name only
    shards from a source you trust."""
    passage_tokens: int | None = None
    """None: each corpus row is one vector (a long document truncated at the encoder's length, as BrowseComp-Plus
    encodes its documents). N: rows longer than N whitespace tokens are cut into passages of N tokens (views of the
    row, `rollout.retrieval.doc_passages`), each encoded, and a row ranks by its best passage."""
    passage_overlap: int = 0
    """Tokens consecutive passages of one row share (0 to passage_tokens - 1)."""
    batch_size: int = 64
    """Passages per encoder batch when building."""
    max_query_batch: int = 16
    """Most concurrent queries encoded together and searched in one faiss call; 1 = each alone. Speed only."""
    batch_wait_ms: float = 2.0
    """Longest the batcher waits for the queries it expects (as many as its last batch held). Speed only."""
    shards: int = 1
    """S > 1 splits the index into S contiguous row ranges, each its own faiss index, searched side by side and
    merged exactly (`rollout.retrieval.dense_shards`). A flat index answers as unsharded; an HNSW or IVF index is
    built per shard, so its approximation (and the run's identity) changes with S."""
    serve: bool = False
    """Serve each shard as its own Ray Serve deployment (`rollout.retrieval.dense_serve`), placed across the
    cluster's nodes, instead of searching the shards in the gateway's process; for gateways on Ray Serve
    (`gateway.replicas` > 1). Layout only: the same hits and scores."""
    serve_replicas: int = 1
    """Replicas of each shard's deployment (more for throughput)."""
    serve_cpus: float = 1.0
    """CPUs each shard replica reserves on its node."""
    serve_timeout_s: float = 60.0
    """Longest a search waits for a shard's answer; a shard whose replica is down (Serve holds its requests until it
    has restarted one) fails the search as unavailable after this."""


@dataclass(frozen=True, slots=True)
class HybridParams:
    """Reciprocal-rank fusion of dense and sparse rankings."""

    rrf_k: int = 60
    """score = sum over retrievers of 1 / (rrf_k + rank)."""
    candidates: int = 50
    """How deep each retriever ranks before fusion (at least the requested k)."""


@dataclass(frozen=True, slots=True)
class SnippetParams:
    """The snippets BrowseComp-Plus' search tool returns (`rollout.gateway.tools.browsecomp`): each document's
    first `max_tokens` tokens by one named tokenizer."""

    tokenizer: str | None = None
    """A tokenizer.json, a folder holding one, or a Hugging Face name read from the local cache (BrowseComp-Plus
    cuts with Qwen/Qwen3-0.6B's); None = the gateway's tokenizer (`tokenizer=`, itself the bundled encoder's
    WordPiece when null)."""
    max_tokens: int = 512


@dataclass(frozen=True, slots=True)
class RetrievalParams:
    """All index parameters of a run."""

    dense: DenseParams = field(default_factory=DenseParams)
    sparse: SparseParams = field(default_factory=SparseParams)
    hybrid: HybridParams = field(default_factory=HybridParams)
    snippet: SnippetParams = field(default_factory=SnippetParams)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RetrievalParams:
        """From the `retriever` config section; unknown keys are an error naming the valid ones."""
        data = dict(data or {})
        parts: dict[str, Any] = {}
        for name, kind in (("dense", DenseParams), ("sparse", SparseParams), ("hybrid", HybridParams),
                           ("snippet", SnippetParams)):
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
        check_sparse_method(params.sparse.method)
        check_pruning(params.sparse.pruning)
        check_encoder_backend(params.dense.backend)
        check_dense_index(params.dense.index)
        check_pooling(params.dense.pooling)
        check_dense_source(params.dense)
        check_passages(params.dense)
        check_dense_shards(params.dense)
        if isinstance(params.snippet.max_tokens, bool) or not isinstance(params.snippet.max_tokens, int) \
                or params.snippet.max_tokens < 1:
            raise RetrievalError(f"retriever.snippet.max_tokens={params.snippet.max_tokens!r} must be a positive "
                                 "integer; BrowseComp-Plus' snippets are 512 tokens")
        return params

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
