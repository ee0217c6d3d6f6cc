"""Index builds past one machine: the corpus encoded by Ray Data on the cluster's GPUs or CPUs, BM25's tokenizing as
Ray tasks, the indexes assembled where the command runs and cached as a run's gateway would cache them.

Encoding 21M passages is a GPU-cluster job. `encode_on_ray` splits the corpus store's rows into shards of
`rows_per_shard` (a multiple of the encoder's batch size, so every batch is the one a single-machine build encodes
and the vectors are the same), maps them over `encoders` actors (each with `gpus_per_encoder` GPUs, or one CPU), and
each actor writes its shards' vectors as `.npy` files into a folder of the cache, while a log line says how far the
encoding is (`rollout.retrieval.encode_progress`). `assemble_dense` then adds the shards in row order to a flat or
HNSW index, or trains an IVF (IVF-PQ) index on the sample a local build would draw and adds them. `ray_tokenizer` hands BM25's chunks to Ray tasks and gets them back in order for
`rollout.retrieval.bm25_build` to merge. With `retriever.dense.shards=S`, `build_shards_on_ray` builds the S shard
indexes (`rollout.retrieval.dense_shards`) from the encoded files instead, each from its own rows.

Every node reads the corpus store and writes shards under the cache directory: on a cluster it must be a shared
file system (the same path on every node). The run that follows, with the same cache, finds the indexes built.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from rollout.errors import RetrievalError
from rollout.logs import adopt_ray_data_logger
from rollout.records import Passage
from rollout.retrieval.bm25_build import ChunkTokenizer, TokenizedChunk, tokenize_store_rows
from rollout.retrieval.dense import DenseRetriever, search_settings
from rollout.retrieval.dense_ivf import new_ivf, sample_rows, train_ivf
from rollout.retrieval.dense_shards import ShardedDenseRetriever, build_shards_into
from rollout.retrieval.encode_progress import EncodeProgress
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.params import DenseParams, SparseParams

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RayBuild:
    """How an index build uses a Ray cluster."""

    encoders: int | None = None
    """Encoder actors (default: one per GPU, else one per CPU, of the cluster)."""
    gpus_per_encoder: float = 0.0
    """GPUs each encoder actor holds; 0 encodes on CPUs."""
    rows_per_shard: int = 65_536
    """Passages per shard of vectors (rounded down to a multiple of the encoder's batch size)."""
    tasks_ahead: int | None = None
    """BM25 chunks tokenizing at once (default: the cluster's CPUs)."""


def _store_path(passages: Sequence[Passage]) -> Path:
    path = getattr(passages, "path", None)
    if path is None:
        raise RetrievalError("a build on Ray reads the corpus from its store on every node: open the corpus with "
                             "rollout.data.open_corpus (the cache directory must be shared by the nodes)")
    return Path(path)


class _ShardEncoder:
    """A Ray Data actor: loads the encoder once, encodes row ranges of the store, writes each as a shard."""

    def __init__(self, store_path: str, params: dict[str, Any], cache_dir: str, shard_dir: str) -> None:
        from rollout.data.corpus_store import CorpusStore
        from rollout.retrieval.encoder import load_encoder

        self.store = CorpusStore(Path(store_path))
        self.encoder = load_encoder(DenseParams(**params), cache_dir=Path(cache_dir))
        self.shard_dir = Path(shard_dir)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for start, stop in zip(batch["start"].tolist(), batch["stop"].tolist(), strict=True):
            vectors = self.encoder.encode_passages(self.store.contents(start, stop))
            tmp = self.shard_dir / f".{start:012d}.npy"
            np.save(tmp, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
            tmp.rename(self.shard_dir / f"{start:012d}.npy")  # a shard is there whole or not at all
        return batch


def encode_on_ray(passages: Sequence[Passage], params: DenseParams, cache_dir: Path, shard_dir: Path,
                  settings: RayBuild) -> list[Path]:
    """Every passage's vector, written by Ray Data actors as shards in `shard_dir`; the shard files in row order."""
    import ray
    import ray.data

    from rollout.ray_console import quiet_notice  # here: it imports Ray, which a gateway that imports this lacks

    store = _store_path(passages)
    n = len(passages)
    per_shard = max(params.batch_size, settings.rows_per_shard // params.batch_size * params.batch_size)
    shards = [{"start": start, "stop": min(start + per_shard, n)} for start in range(0, n, per_shard)]
    shard_dir.mkdir(parents=True, exist_ok=True)
    todo = [s for s in shards if not (shard_dir / f"{s['start']:012d}.npy").is_file()]  # a build that resumes
    encoders = encoder_count(ray.cluster_resources(), settings)
    gpus = settings.gpus_per_encoder
    logger.info("Encoding %d passages on Ray: %d shards of %d (%d to do) on %d encoder actor(s)%s", n, len(shards),
                per_shard, len(todo), encoders, f" with {gpus:g} GPU each" if gpus else "")
    if todo:
        context = ray.data.DataContext.get_current()
        # The progress line below says what is encoded; Ray Data's bars would redraw every few seconds beside it.
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        quiet_notice("ray.data._internal.progress", "Progress bars disabled")
        adopt_ray_data_logger()
        encoded = (ray.data.from_items(todo)
                   .map_batches(_ShardEncoder, batch_size=1,
                                compute=ray.data.ActorPoolStrategy(size=min(encoders, len(todo))),
                                num_gpus=gpus or None, num_cpus=None if gpus else 1,
                                fn_constructor_kwargs={"store_path": str(store), "params": asdict(params),
                                                       "cache_dir": str(cache_dir), "shard_dir": str(shard_dir)}))
        progress = EncodeProgress(sum(s["stop"] - s["start"] for s in todo))
        for batch in encoded.iter_batches(batch_size=None):  # each as its shards are written
            progress.add(int(np.sum(batch["stop"] - batch["start"])))
    files = [shard_dir / f"{s['start']:012d}.npy" for s in shards]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise RetrievalError(f"Ray finished without writing shards {missing[:3]} in {shard_dir}: is the cache "
                             "directory shared by every node of the cluster?")
    return files


def encoder_count(resources: dict[str, float], settings: RayBuild) -> int:
    """The encoder actors of a build: `settings.encoders`, else one per GPU (with GPUs) or CPU of the cluster."""
    gpus = settings.gpus_per_encoder
    if gpus and resources.get("GPU", 0) < gpus:
        logger.warning("build.gpus_per_encoder=%g but the Ray cluster has %g GPU now: the encoders wait for GPU nodes "
                       "to join (build.gpus_per_encoder=0 encodes on CPUs)", gpus, resources.get("GPU", 0))
    if settings.encoders:
        return settings.encoders
    return max(1, int(resources.get("GPU", 0) // gpus) if gpus else int(resources.get("CPU", 1)))


def assemble_dense(files: Sequence[Path], encoder: TextEncoder, params: DenseParams) -> DenseRetriever:
    """The index of the shards' vectors, added in row order (an IVF trained first on a local build's sample)."""
    shards = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files]
    n = sum(len(s) for s in shards)
    d = encoder.dimension
    if any(s.ndim != 2 or s.shape[1] != d for s in shards):
        raise RetrievalError(f"a shard's vectors are not {d}-d ({encoder.model_id!r}); delete the shard folder")
    if params.index == "ivf":
        index, layout = new_ivf(n, d, params)
        rows = sample_rows(n, layout) if layout.train_size < n else np.arange(n)
        starts = np.cumsum([0] + [len(s) for s in shards])
        which = np.searchsorted(starts, rows, side="right") - 1
        train_ivf(index, layout, np.stack([shards[w][r - starts[w]] for w, r in zip(which, rows, strict=True)]))
    elif params.index == "hnsw":
        index = faiss.IndexHNSWFlat(d, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
    else:
        index = faiss.IndexFlatIP(d)
    for shard in shards:
        index.add(np.ascontiguousarray(shard))
    return DenseRetriever(index, encoder, **search_settings(params))


def build_dense_on_ray(passages: Sequence[Passage], encoder: TextEncoder, params: DenseParams, cache_dir: Path,
                       path: Path, settings: RayBuild) -> DenseRetriever:
    """Encode on Ray, assemble here, save into `path`; the shards are deleted once the index is saved."""
    started = time.perf_counter()
    shard_dir = Path(cache_dir) / f"shards-{path.name.split('-', 2)[-1]}"
    files = encode_on_ray(passages, params, cache_dir, shard_dir, settings)
    encoded = time.perf_counter()
    retriever = assemble_dense(files, encoder, params)
    retriever.save(path)
    shutil.rmtree(shard_dir, ignore_errors=True)
    logger.info("Dense index on Ray: encoded in %.1f s, assembled in %.1f s", encoded - started,
                time.perf_counter() - encoded)
    return retriever


def build_shards_on_ray(passages: Sequence[Passage], encoder: TextEncoder, params: DenseParams, cache_dir: Path,
                        path: Path, settings: RayBuild) -> ShardedDenseRetriever:
    """Encode on Ray, then build the `params.shards` shard indexes here, each over its rows of the encoded files
    (the shards a local build makes of the same vectors), into `path`; the encoded files are deleted after."""
    started = time.perf_counter()
    shard_dir = Path(cache_dir) / f"shards-{path.name.split('-', 3)[-1]}"
    files = encode_on_ray(passages, params, cache_dir, shard_dir, settings)
    encoded = time.perf_counter()
    parts = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files]
    starts = np.cumsum([0] + [len(part) for part in parts])

    def rows_of(start: int, stop: int) -> np.ndarray:
        first = int(np.searchsorted(starts, start, side="right")) - 1
        last = int(np.searchsorted(starts, stop, side="left"))
        pieces = [parts[i][max(start, starts[i]) - starts[i]:min(stop, starts[i + 1]) - starts[i]]
                  for i in range(first, last)]
        return np.concatenate(pieces).astype(np.float32, copy=False)

    retriever = build_shards_into(path, rows_of, int(starts[-1]), encoder=encoder, params=params)
    shutil.rmtree(shard_dir, ignore_errors=True)
    logger.info("Dense index in %d shards on Ray: encoded in %.1f s, built in %.1f s", params.shards,
                encoded - started, time.perf_counter() - encoded)
    return retriever


def ray_tokenizer(settings: RayBuild) -> ChunkTokenizer:
    """BM25 chunks tokenized as Ray tasks (each maps the store on its node), yielded in order."""

    def tokenize(passages: Sequence[Passage], bounds: list[tuple[int, int]],
                 params: SparseParams) -> Iterator[TokenizedChunk]:
        import ray

        store = str(_store_path(passages))
        task = ray.remote(num_cpus=1)(tokenize_store_rows)
        ahead = settings.tasks_ahead or max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = []
        for start, stop in bounds:
            pending.append(task.remote(store, start, stop, params.stopwords, params.stemming))
            if len(pending) > ahead:
                yield ray.get(pending.pop(0))
        for ref in pending:
            yield ray.get(ref)

    return tokenize
