"""Retrieval benchmark on the generated demo knowledge base: BM25 backends, dense Flat vs HNSW, startup.

    python bench/retrieval.py [--passages 100000] [--queries 1000] [--sparse-only]

Prints one table; every figure and ratio in it is measured in this run, side by side, except
cold builds found in the cache: those are reported from the run that built them (marked
"first run"). Indexes, passage embeddings and those build figures are kept under
`--cache-dir`, so a re-run skips the long encode; delete the directory to measure it again.

Timing: fast steps (index-only searches, bm25s) are the best of three passes, slow ones
(anything that encodes, rank_bm25) a single pass; loads are the median of three fresh
processes. `faiss` is imported only after `rollout.retrieval`, which sets OpenMP's wait
policy before faiss loads, as any process serving both indexes gets it.

Memory: each build and each load runs alone in a freshly spawned process (see
`retrieval_common`). Memory-mapped index pages count once touched, so loads are measured
through their first search.

BM25 kernel paths (our postings kernel beside bm25s' own retrieval) and the first query after
a fresh load are measured in `retrieval_bm25`. `--sparse-only` skips everything that needs
the encoder (embedding, dense indexes): minutes of the run on a small machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
from retrieval_bm25 import bench_bm25, bench_bm25_paths, bench_first_query
from retrieval_common import K, Row, Step, in_child, measure, median_in_children, print_table, rate, timed

from rollout.data import ensure_demo_kb, load_corpus, load_questions
from rollout.paths import default_cache_dir
from rollout.retrieval import BM25Retriever, DenseParams, DenseRetriever, Encoder, SparseParams
from rollout.retrieval.cache import corpus_fingerprint
from rollout.retrieval.dense import FAISS_BLAS_THRESHOLD_DEFAULT

logger = logging.getLogger("bench.retrieval")

BATCH = 64
SMALL = (1, 16, 64)
"""Batch sizes of the BLAS-threshold comparison."""


def _job_encoder_load() -> Step:
    return measure(lambda: Encoder.from_params(DenseParams()))[1]


def _job_encode(corpus_path: str, out: str) -> Step:
    passages = load_corpus(corpus_path)
    encoder = Encoder.from_params(DenseParams())
    texts = [p.contents for p in passages]
    vectors, step = measure(lambda: encoder.encode_passages(texts, show_progress=True))
    np.save(out, vectors, allow_pickle=False)
    return step


def _job_build_dense(embeddings: str, out: str, index: str) -> Step:
    vectors = np.load(embeddings, allow_pickle=False)
    params = DenseParams(index=index)  # type: ignore[arg-type]
    retriever, step = measure(lambda: DenseRetriever.from_vectors(vectors, encoder=None, params=params))
    retriever.save(Path(out))
    return step


def _job_build_sparse(corpus_path: str, out: str, backend: str) -> Step:
    passages = load_corpus(corpus_path)
    params = SparseParams(backend=backend)  # type: ignore[arg-type]
    retriever, step = measure(lambda: BM25Retriever.build(passages, params))
    retriever.save(Path(out))
    return step


def _job_load(dense_dir: str | None, sparse_dir: str | None, probe: tuple[str, list[float]] | None) -> Step:
    """Load the given indexes; with a probe, also answer one query each (mapped pages are read then)."""

    def load() -> None:
        if dense_dir is not None:
            dense = DenseRetriever.load(Path(dense_dir), encoder=None)
            if probe is not None:
                dense.search_vectors(np.asarray([probe[1]], dtype=np.float32), K)
        if sparse_dir is not None:
            sparse = BM25Retriever.load(Path(sparse_dir))
            if probe is not None:
                sparse.search([probe[0]], K)

    return measure(load)[1]


class BuildCache:
    """Index directories, embeddings and the cold-build figures of one corpus."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._figures_path = root / "figures.json"
        self._figures: dict[str, dict[str, float]] = (
            json.loads(self._figures_path.read_text(encoding="utf-8")) if self._figures_path.is_file() else {}
        )

    def get(self, name: str, product: Path, build: Callable[[], Step]) -> tuple[Step, bool]:
        """The build figures of `name`, building `product` first if absent; bool = measured now."""
        if product.exists() and name in self._figures:
            return Step(**self._figures[name]), False
        logger.info("building %s (cold) ...", name)
        step = build()
        self._figures[name] = asdict(step)
        tmp = self._figures_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._figures, indent=2), encoding="utf-8")
        os.replace(tmp, self._figures_path)
        logger.info("built %s in %.1f s", name, step.seconds)
        return step, True


def _batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _numpy_top_k(passages: np.ndarray, queries: np.ndarray) -> np.ndarray:
    sims = queries @ passages.T
    return np.argpartition(-sims, K - 1, axis=1)[:, :K]


def _recall(reference: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(reference.tolist(), found.tolist(), strict=True)]))


def bench_dense(
    encoder: Encoder, indexes: dict[str, DenseRetriever], embeddings: np.ndarray, queries: Sequence[str]
) -> list[Row]:
    n = len(queries)
    queries = list(queries)
    encoder.encode_queries(queries[:BATCH])  # warm-up
    vectors = encoder.encode_queries(queries)
    enc_single = timed(lambda: [encoder.encode_queries([q]) for q in queries])
    enc_batch = timed(lambda: [encoder.encode_queries(queries[s]) for s in _batches(n, BATCH)])
    rows = [
        Row("dense", "encoder, single query", f"{rate(n, enc_single):,.0f} q/s"),
        Row("dense", f"encoder, batches of {BATCH}", f"{rate(n, enc_batch):,.0f} q/s"),
    ]
    flat_top = indexes["flat"].search_vectors(vectors, K).indices
    for kind, retriever in indexes.items():
        retriever.search_vectors(vectors[:BATCH], K)  # warm-up: maps the pages in
        idx_single = timed(lambda: [retriever.search_vectors(vectors[i : i + 1], K) for i in range(n)], repeat=3)
        idx_batch = timed(lambda: [retriever.search_vectors(vectors[s], K) for s in _batches(n, BATCH)], repeat=3)
        e2e_single = timed(lambda: [retriever.search([q], K) for q in queries])
        e2e_batch = timed(lambda: [retriever.search(queries[s], K) for s in _batches(n, BATCH)])
        rows += [
            Row("dense", f"{kind}, precomputed vectors, single query", f"{rate(n, idx_single):,.0f} q/s"),
            Row("dense", f"{kind}, precomputed vectors, batches of {BATCH}", f"{rate(n, idx_batch):,.0f} q/s",
                target=">= 1,500 q/s" if kind == "flat" else ""),
            Row("dense", f"{kind}, end to end, single query", f"{rate(n, e2e_single):,.0f} q/s"),
            Row("dense", f"{kind}, end to end, batches of {BATCH}", f"{rate(n, e2e_batch):,.0f} q/s"),
            Row("dense", f"{kind}, encoder share of time, single / batched",
                f"{enc_single / (enc_single + idx_single):.0%} / {enc_batch / (enc_batch + idx_batch):.0%}"),
        ]
        if kind == "hnsw":
            recall = _recall(flat_top, retriever.search_vectors(vectors, K).indices)
            rows.append(Row("dense", f"hnsw recall@{K} vs flat (ef_search={retriever.ef_search})", f"{recall:.3f}"))
    rows += _dense_references(indexes["flat"], embeddings, vectors)
    return rows


def _dense_references(flat: DenseRetriever, embeddings: np.ndarray, vectors: np.ndarray) -> list[Row]:
    """Flat search against numpy brute force, a whole-set batch, this CPU's ceiling, and the BLAS threshold."""
    import faiss  # after rollout.retrieval (see the module docstring)

    n = len(vectors)
    batches = _batches(n, BATCH)
    faiss_s = timed(lambda: [flat.search_vectors(vectors[s], K) for s in batches], repeat=3)
    whole_s = timed(lambda: flat.search_vectors(vectors, K), repeat=3)
    numpy_s = timed(lambda: [_numpy_top_k(embeddings, vectors[s]) for s in batches], repeat=3)
    # numpy's BLAS threads spin for a while after a call and would slow faiss' threads down.
    time.sleep(1.0)
    peak = _gemm_peak_flops()
    # Exact search scores every passage: 2 x dimension operations each, whatever the library.
    ceiling = peak / (2 * embeddings.shape[0] * embeddings.shape[1])
    m = min(n, 256)

    def small_batches() -> list[float]:
        """Seconds for m queries one at a time, in 16s and in 64s."""
        return [timed(lambda: [flat.search_vectors(vectors[s], K) for s in _batches(m, size)], 3) for size in SMALL]

    lowered = faiss.cvar.distance_compute_blas_threshold
    with_lowered = small_batches()
    faiss.cvar.distance_compute_blas_threshold = FAISS_BLAS_THRESHOLD_DEFAULT
    try:
        with_default = small_batches()
    finally:
        faiss.cvar.distance_compute_blas_threshold = lowered
    return [
        Row("dense", f"numpy brute force (matmul + argpartition), batches of {BATCH}", f"{rate(n, numpy_s):,.0f} q/s"),
        Row("dense", "ratio faiss flat / numpy, batches of 64", f"{numpy_s / faiss_s:.2f}x"),
        Row("dense", f"flat, precomputed vectors, all {n} in one call", f"{rate(n, whole_s):,.0f} q/s"),
        Row("dense", "this CPU's float32 matrix-product peak (2048^3, torch/MKL)", f"{peak / 1e9:,.1f} GFLOP/s"),
        Row("dense", "exact search ceiling there = peak / (2 x passages x dimension)", f"{ceiling:,.0f} q/s"),
        Row("dense", f"flat batches of {BATCH} as a share of that ceiling", f"{rate(n, faiss_s) / ceiling:.0%}"),
        Row("dense", f"ratio flat, BLAS threshold {lowered} / faiss default {FAISS_BLAS_THRESHOLD_DEFAULT:,}, "
            f"batches of {' / '.join(map(str, SMALL))}",
            " / ".join(f"{default / low:.1f}x" for default, low in zip(with_default, with_lowered, strict=True))),
    ]


def _gemm_peak_flops() -> float:
    """Floating-point operations per second of the best of five 2048-cube float32 matrix products."""
    import torch

    a = torch.randn(2048, 2048)
    torch.mm(a, a)  # warm-up
    return 2 * 2048**3 / timed(lambda: torch.mm(a, a), repeat=5)


def bench_startup(
    cache: BuildCache, corpus_path: Path, probe_query: str, probe_vector: np.ndarray | None, passages_count: int
) -> tuple[list[Row], dict[str, Path]]:
    """Cold builds and warm loads; without a probe vector, of the sparse indexes only."""
    kinds = {"flat": "dense", "hnsw": "dense", "bm25s": "sparse", "rank_bm25": "sparse"}
    dirs = {name: cache.root / f"{kind}-{name}" for name, kind in kinds.items()}
    embeddings = cache.root / "embeddings.npy"
    rows: list[Row] = []

    def built(step: Step, fresh: bool, label: str) -> None:
        label += "" if fresh else " (first run)"
        rows.append(Row("startup", f"cold build: {label}", f"{step.seconds:,.1f} s", f"+{step.peak_rss_mib:,.0f} MiB"))

    dense = probe_vector is not None
    if dense:
        encode, fresh = cache.get(
            "encode", embeddings, lambda: in_child(_job_encode, str(corpus_path), str(embeddings))
        )
        built(encode, fresh, f"encode {passages_count:,} passages (all-MiniLM-L6-v2)")
    for kind in ("flat", "hnsw") if dense else ():
        step, fresh = cache.get(
            f"dense-{kind}", dirs[kind], lambda: in_child(_job_build_dense, str(embeddings), str(dirs[kind]), kind)
        )
        built(step, fresh, f"dense {kind}: faiss add")
        total = f"{encode.seconds + step.seconds:,.1f} s"
        rows.append(Row("startup", f"cold build: dense {kind} = encode + add", total))
    for backend in ("bm25s", "rank_bm25"):
        args = (str(corpus_path), str(dirs[backend]), backend)
        step, fresh = cache.get(f"sparse-{backend}", dirs[backend], lambda: in_child(_job_build_sparse, *args))
        built(step, fresh, f"sparse {backend}: tokenize + index")

    if dense:
        model = in_child(_job_encoder_load)
        memory = f"+{model.peak_rss_mib:,.0f} MiB"
        rows.append(Row("startup", "encoder model load (separate)", f"{model.seconds:.2f} s", memory))
    probe = (probe_query, [] if probe_vector is None else probe_vector.tolist())
    for name, dense_dir, sparse in (
        ("dense flat", dirs["flat"], None),
        ("dense hnsw", dirs["hnsw"], None),
        ("sparse bm25s", None, dirs["bm25s"]),
        ("sparse rank_bm25", None, dirs["rank_bm25"]),
        ("flat + bm25s together", dirs["flat"], dirs["bm25s"]),
        ("hnsw + bm25s together", dirs["hnsw"], dirs["bm25s"]),
    ):
        if dense_dir is not None and not dense:
            continue
        args = (None if dense_dir is None else str(dense_dir), None if sparse is None else str(sparse))
        load, touched = median_in_children(_job_load, *args, None), median_in_children(_job_load, *args, probe)
        rows.append(Row(
            "startup", f"warm load: {name} (load only; with first search)",
            f"{load.seconds:.2f} s; {touched.seconds:.2f} s", f"+{touched.peak_rss_mib:,.0f} MiB",
            "< 3 s" if "together" in name else "",
        ))
    return rows, dirs


def _print_table(rows: list[Row], header: str) -> None:
    print_table(header, ("area", "measurement", "value", "peak RSS delta", "target"), [(r.area, r.measurement, r.value, r.memory, r.target) for r in rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--rank-bm25-queries", type=int, default=25, help="rank_bm25 answers ~3 q/s at 100k")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir() / "bench")
    parser.add_argument("--sparse-only", action="store_true", help="skip the encoder and the dense indexes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_before = os.getloadavg()[0]

    kb = ensure_demo_kb(args.cache_dir, n_passages=args.passages, n_questions=args.queries, seed=args.seed)
    passages = load_corpus(kb.corpus_path)
    queries = [q.question for q in load_questions(kb.questions_path)]
    fingerprint_s = timed(lambda: corpus_fingerprint(passages))
    cache = BuildCache(args.cache_dir / f"retrieval-{corpus_fingerprint(passages)[:16]}")

    encoder = None if args.sparse_only else Encoder.from_params(DenseParams())
    probe = None if encoder is None else encoder.encode_queries(queries[:1])[0]
    startup, dirs = bench_startup(cache, kb.corpus_path, queries[0], probe, len(passages))
    startup.append(Row("startup", "cache key: corpus fingerprint (sha256)", f"{fingerprint_s:.2f} s"))
    logger.info("measuring the first query of fresh processes ...")
    startup += bench_first_query(dirs["bm25s"], queries[0])

    logger.info("measuring query throughput ...")
    n_rank = min(args.rank_bm25_queries, len(queries))
    sparse = BM25Retriever.load(dirs["bm25s"])
    bm25 = bench_bm25(sparse, BM25Retriever.load(dirs["rank_bm25"]), queries, n_rank)
    bm25 += bench_bm25_paths(dirs["bm25s"], sparse, queries)
    dense: list[Row] = []
    if encoder is not None:
        dense_indexes = {kind: DenseRetriever.load(dirs[kind], encoder=encoder) for kind in ("flat", "hnsw")}
        embeddings = np.load(cache.root / "embeddings.npy", allow_pickle=False)
        dense = bench_dense(encoder, dense_indexes, embeddings, queries)

    import faiss  # after rollout.retrieval (see the module docstring)

    header = (
        f"retrieval benchmark: {len(passages):,} passages, {len(queries):,} queries, top-{K}, "
        f"{os.cpu_count()} cores, faiss {faiss.__version__}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    _print_table(bm25 + dense + startup, header)


if __name__ == "__main__":
    main()
