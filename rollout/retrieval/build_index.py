"""`rollout build-index`: a corpus' indexes built on a Ray cluster into the cache a run reads.

    python -m rollout.retrieval.build_index dataset.corpus.path=/data/wiki18_100w.jsonl ray.address=auto

The corpus is written into its store (`rollout.data.corpus_store`) here; then the dense index is encoded by Ray Data
actors (GPUs with `build.gpus_per_encoder`) and assembled here, and BM25's tokenizing runs as Ray tasks
(`rollout.retrieval.ray_build`). Each index lands in the cache under the key a run computes, so
`python -m rollout ... cache_dir=SAME` loads it instead of building. `retriever.kind` picks the indexes (all, dense,
sparse; hybrid needs both). The cache directory must be a file system every node shares.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from rollout.data import open_corpus
from rollout.errors import RolloutError
from rollout.hydra_argv import hydra_argv
from rollout.logs import apply_verbosity, parse_verbose
from rollout.paths import CONF_DIR, default_cache_dir
from rollout.retrieval.cache import load_or_build_indexes
from rollout.retrieval.params import RetrievalParams
from rollout.retrieval.ray_build import RayBuild
from rollout.run.dataset import DatasetConfig, prepare_data

logger = logging.getLogger(__name__)

KINDS = {"all": ["dense", "sparse"], "dense": ["dense"], "sparse": ["sparse"], "hybrid": ["dense", "sparse"]}


def build_indexes(cfg: DictConfig) -> list[Path]:
    """Build (or find) the indexes `cfg` names on Ray; the cache entries they are in."""
    import ray

    c = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    kind = c["retriever"].get("kind", "all")
    if kind not in KINDS:
        raise RolloutError(f"retriever.kind={kind!r}: use retriever=dense, sparse or default (both)")
    unknown = sorted(set(c["build"]) - {"encoders", "gpus_per_encoder", "rows_per_shard", "tasks_ahead"})
    if unknown:
        raise RolloutError(f"unknown build setting(s) {unknown}: use encoders, gpus_per_encoder, rows_per_shard, "
                           "tasks_ahead")
    settings = RayBuild(**c["build"])
    cache_dir = Path(c["cache_dir"]) if c.get("cache_dir") else default_cache_dir()
    data = prepare_data(DatasetConfig.from_dict(c["dataset"]), cache_dir)
    store = open_corpus(data.corpus_path, cache_dir)
    before = set(cache_dir.iterdir())
    ray.init(address=c["ray"]["address"], include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    try:
        logger.info("Ray: %s", ", ".join(f"{v:g} {k}" for k, v in sorted(ray.cluster_resources().items())
                                          if k in ("CPU", "GPU")))
        load_or_build_indexes(store, cache_dir, which=KINDS[kind], params=RetrievalParams.from_dict(c["retriever"]),
                              on_ray=settings)
    finally:
        ray.shutdown()
    entries = sorted(p for p in cache_dir.iterdir() if p.name.startswith(("dense-", "sparse-")))
    for entry in entries:
        logger.info("%s %s", "built" if entry not in before else "found", entry)
    return entries


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="build_index")
def hydra_main(cfg: DictConfig) -> None:
    try:
        apply_verbosity(parse_verbose(cfg.get("verbose", 0)))
        build_indexes(cfg)
    except RolloutError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> None:
    """`python -m rollout.retrieval.build_index OVERRIDES...` (also `rollout build-index`); argv goes to Hydra."""
    with hydra_argv(list(sys.argv[1:] if argv is None else argv), prog):
        hydra_main()


if __name__ == "__main__":
    main()
