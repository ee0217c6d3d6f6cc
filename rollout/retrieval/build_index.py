"""`rollout build-index`: a corpus' indexes built on a Ray cluster into the cache a run reads.

    python -m rollout.retrieval.build_index dataset=nq dataset.corpus.path=/data/wiki18_100w.jsonl ray.address=auto

Only the corpus is read: the dataset's question (and qrels) settings may stay unset. The corpus is written into its
store (`rollout.data.corpus_store`) here; then the dense index is encoded by Ray Data actors (GPUs with
`build.gpus_per_encoder`) and assembled here, and BM25's tokenizing runs as Ray tasks (`rollout.retrieval.ray_build`).
The console reads as a run's: Ray's lines in the one format (`rollout.ray_console`), and a line on how far the
encoding is (`rollout.retrieval.encode_progress`). Each index lands in the cache under the key a run computes, so
`python -m rollout ... cache_dir=SAME` loads it instead of building (with `retriever.dense.shards=S`, the S shards of
the dense index, `rollout.retrieval.dense_shards`). `retriever.kind` picks the indexes (all, dense,
sparse; hybrid needs both). The cache directory must be a file system every node shares.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf, open_dict

from rollout.data import materialize_corpus, open_corpus
from rollout.data.browsecomp_plus import check_corpus_spec, read_offline
from rollout.data.dataset import DatasetConfig, data_sources
from rollout.errors import ConfigError, RolloutError
from rollout.hydra_argv import hydra_command
from rollout.logs import RAY_WORKER_SETUP_HOOK, levels, parse_verbose, ray_worker_env
from rollout.paths import default_cache_dir
from rollout.ray_console import forward_worker_logs, native_lines_logged, quiet_token_notice
from rollout.retrieval.cache import load_or_build_indexes
from rollout.retrieval.params import RetrievalParams
from rollout.retrieval.ray_build import RayBuild

logger = logging.getLogger(__name__)

KINDS = {"all": ["dense", "sparse"], "dense": ["dense"], "sparse": ["sparse"], "hybrid": ["dense", "sparse"]}
UNREAD = ("questions", "qrels", "limit")
"""The dataset settings a build does not read: it indexes the corpus alone."""


def build_settings(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain values, without the question settings (`dataset=nq` leaves their path `???`);
    a value still missing is a `ConfigError` naming the override that sets it."""
    cfg = cfg.copy()
    with open_dict(cfg):
        for key in UNREAD:
            cfg.dataset.pop(key, None)
    missing = sorted(OmegaConf.missing_keys(cfg))
    if "dataset.corpus.path" in missing:
        raise ConfigError("dataset.corpus.path is not set: name the corpus to index, e.g. "
                          "dataset.corpus.path=/data/wiki18_100w.jsonl (a FlashRAG jsonl, a .parquet file or a "
                          "folder of documents)")
    if missing:
        raise ConfigError(f"{missing[0]} is not set: give it on the command line ({missing[0]}=...)")
    return OmegaConf.to_container(cfg, resolve=True)


def corpus_file(ds: DatasetConfig, cache_dir: Path) -> Path:
    """The corpus of `ds` as the FlashRAG jsonl a run serves (written once into `cache_dir` when it is another
    format); its questions are not read."""
    if ds.kind == "browsecomp_plus":
        check_corpus_spec(ds.corpus)
        return read_offline(lambda: materialize_corpus(ds.corpus, cache_dir), ds.corpus)
    corpus, _ = data_sources(ds, cache_dir)
    return materialize_corpus(corpus, cache_dir)


@contextlib.contextmanager
def ray_for_the_build(address: str | None, verbose: int) -> Iterator[None]:
    """Ray for the build, its console as a run's (`rollout.ray_console`): the workers' lines and Ray's own in
    the one format, Ray's token notice left out; shut down at the end.

    `ray.address: null` is a Ray of the build's own, as for a run: Ray's default would join any cluster a
    `ray start` left on this machine. Workers log in the one format at the command's verbosity (the setup hook)."""
    quiet_token_notice()
    ray.init(address=address or "local", include_dashboard=False, logging_level=levels(verbose).libraries,
             log_to_driver=True, runtime_env={"env_vars": ray_worker_env(verbose),
                                              "worker_process_setup_hook": RAY_WORKER_SETUP_HOOK})
    forward_worker_logs()
    try:
        with native_lines_logged():
            yield
    finally:
        ray.shutdown()


def build_indexes(cfg: DictConfig) -> list[Path]:
    """Build (or find) the indexes `cfg` names on Ray; the cache entries they are in."""
    c = build_settings(cfg)
    kind = c["retriever"].get("kind", "all")
    if kind not in KINDS:
        raise RolloutError(f"retriever.kind={kind!r}: use retriever=dense, sparse or default (both)")
    unknown = sorted(set(c["build"]) - {"encoders", "gpus_per_encoder", "rows_per_shard", "tasks_ahead"})
    if unknown:
        raise RolloutError(f"unknown build setting(s) {unknown}: use encoders, gpus_per_encoder, rows_per_shard, "
                           "tasks_ahead")
    settings = RayBuild(**c["build"])
    cache_dir = Path(c["cache_dir"]) if c.get("cache_dir") else default_cache_dir()
    store = open_corpus(corpus_file(DatasetConfig.from_dict(c["dataset"]), cache_dir), cache_dir)
    before = set(cache_dir.iterdir())
    with ray_for_the_build(c["ray"]["address"], parse_verbose(c.get("verbose", 0))):
        logger.info("Ray: %s", ", ".join(f"{v:g} {k}" for k, v in sorted(ray.cluster_resources().items())
                                          if k in ("CPU", "GPU")))
        load_or_build_indexes(store, cache_dir, which=KINDS[kind], params=RetrievalParams.from_dict(c["retriever"]),
                              on_ray=settings)
    entries = sorted(p for p in cache_dir.iterdir() if p.name.startswith(("dense-", "sparse-")))
    for entry in entries:
        logger.info("%s %s", "built" if entry not in before else "found", entry)
    return entries


main = hydra_command("build_index", build_indexes)
"""`python -m rollout.retrieval.build_index OVERRIDES...` (also `rollout build-index`); argv goes to Hydra."""


if __name__ == "__main__":
    main()
