"""Dense shards on Ray Serve: each shard of a sharded index (`rollout.retrieval.dense_shards`) its own application.

With `retriever.dense.serve=true`, `deploy_shards` runs shard i of a cached sharded index as the Serve application
`shard_app_name(folder, i)`: `retriever.dense.serve_replicas` replicas, each reserving `serve_cpus` CPUs and loading
its shard memory-mapped from the shared cache. Serve places replicas with Ray's SPREAD strategy, so the shards of a
cluster land on different nodes where there are nodes, and each node holds the pages of its own shards only.

A gateway's `served_shards` encodes the queries itself, sends each batch to every shard by Serve handle at once, and
merges their top k exactly (`merge_hits`). A shard that does not answer fails the whole search with
`ShardUnavailable`, never a top k of the other shards: the gateway's tools answer it as `upstream_unavailable`, an
infrastructure failure the run records as such (and a resumed run runs the task again), while Serve restarts the
replica. `ray.serve` is imported only here.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval.base import Hits
from rollout.retrieval.dense import DenseRetriever, search_settings
from rollout.retrieval.dense_shards import (
    LocalShard,
    ShardedDenseRetriever,
    ShardUnavailable,
    read_shards_meta,
    shard_dir,
)
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.params import DenseParams

logger = logging.getLogger(__name__)

DEPLOYMENT = "DenseShard"
_READY_POLL_S = 0.25
SHUTDOWN_WAIT_LOOP_S = 0.2
"""How often a replica being deleted looks whether its requests have finished (Serve's
`graceful_shutdown_wait_loop_s`): Serve's default, 2 s, made each application's deletion at a run's end take
about 3 s. Requests still running get Serve's `graceful_shutdown_timeout_s` as before."""


class ShardReplica:
    """One replica of shard `number` of the sharded index in `folder`: memory-mapped, searched by vectors."""

    def __init__(self, folder: str, number: int, params: dict[str, Any]) -> None:
        meta = read_shards_meta(Path(folder))
        entry = meta["shards"][number]
        retriever = DenseRetriever.load(Path(folder) / shard_dir(number), encoder=None, params=DenseParams(**params))
        self.shard = LocalShard(retriever, 0 if meta["labelled"] else int(entry["start"]))
        logger.debug("dense shard %d (rows %d to %d) ready", number, entry["start"], entry["stop"])

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        hits = self.shard.search_vectors(vectors, k)
        return hits.indices, hits.scores

    def where(self) -> dict[str, Any]:
        """The node, process and faiss threads of this replica (for placement checks and benchmarks)."""
        import faiss
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "threads": faiss.omp_get_max_threads()}


def shard_app_name(folder: Path, number: int) -> str:
    """The Serve application of shard `number` of the cached sharded index in `folder`: named by the cache entry, so
    every gateway replica of a run finds the same applications."""
    return f"rollout-{Path(folder).name}-{number}"


def deploy_shards(folder: Path, params: DenseParams, *, ready_timeout_s: float = 600.0) -> list[str]:
    """Deploy (or find deployed) one Serve application per shard of `folder`; their names, once all run."""
    from ray import serve

    meta = read_shards_meta(folder)
    names = [shard_app_name(folder, i) for i in range(len(meta["shards"]))]
    running = serve.status().applications
    deployment = serve.deployment(ShardReplica, name=DEPLOYMENT)
    for number, name in enumerate(names):
        if name in running:
            continue
        app = deployment.options(num_replicas=params.serve_replicas, graceful_shutdown_wait_loop_s=SHUTDOWN_WAIT_LOOP_S,
                                 ray_actor_options={"num_cpus": params.serve_cpus}).bind(
            str(folder), number, asdict(params))
        serve._run(app, name=name, route_prefix=None, _blocking=False)
    deadline = time.monotonic() + ready_timeout_s
    for name in names:
        _wait_running(name, deadline)
    logger.info("Serving %d dense shards on Ray Serve (%d replica(s) each)", len(names), params.serve_replicas)
    return names


def delete_applications(names: list[str], timeout_s: float = 60.0) -> None:
    """Delete Serve applications (the shards `deploy_shards` made, a run's gateway) all at once, and wait until they
    are gone: one after the other, each deletion's wait would add up."""
    from ray import serve

    try:
        for name in names:
            serve.delete(name, _blocking=False)
        deadline = time.monotonic() + timeout_s
        while left := sorted(set(names) & set(serve.status().applications)):
            if time.monotonic() > deadline:
                logger.warning("The Serve applications %s were not deleted within %g s", ", ".join(left), timeout_s)
                return
            time.sleep(_READY_POLL_S)
    except Exception as e:  # the cluster may be going away under us
        logger.warning("Could not delete the Serve applications %s: %s", ", ".join(names), e)


class ServedShard:
    """A shard searched by its Serve application: its top k in global rows, or `ShardUnavailable`."""

    def __init__(self, app_name: str, timeout_s: float) -> None:
        from ray import serve

        self.app_name = app_name
        self.timeout_s = timeout_s
        self.handle = serve.get_app_handle(app_name)

    def search_vectors(self, vectors: np.ndarray, k: int) -> Hits:
        response = self.handle.search.remote(vectors, k)
        try:
            indices, scores = response.result(timeout_s=self.timeout_s)
        except Exception as e:  # Ray's errors for a dead or unreachable replica are many types
            response.cancel()  # a request Serve holds for a replica still restarting is dropped, not answered later
            raise ShardUnavailable(f"dense shard {self.app_name} did not answer ({type(e).__name__}: {e}); Ray Serve "
                                   "restarts its replica: the search can be tried again (retriever.dense."
                                   "serve_timeout_s bounds the wait)") from e
        return Hits(np.asarray(indices, dtype=np.int64), np.asarray(scores, dtype=np.float32))


def served_shards(folder: Path, *, encoder: TextEncoder | None, params: DenseParams) -> ShardedDenseRetriever:
    """The sharded index in `folder` searched through its Serve applications (deployed once by the run)."""
    from ray import serve

    meta = read_shards_meta(folder)
    names = [shard_app_name(folder, i) for i in range(len(meta["shards"]))]
    missing = [name for name in names if name not in serve.status().applications]
    if missing:
        raise RetrievalError(f"the dense shard application(s) {missing} are not deployed on Ray Serve; "
                             "retriever.dense.serve=true is served by a run with gateway.replicas > 1, which "
                             "deploys them")
    return ShardedDenseRetriever([ServedShard(name, params.serve_timeout_s) for name in names], encoder,
                                 num_passages=int(meta["num_passages"]), dimension=int(meta["dimension"]),
                                 index_type=str(meta["index"]),
                                 batching=search_settings(params)["batching"])


def _wait_running(name: str, deadline: float) -> None:
    from ray import serve

    while True:
        app = serve.status().applications.get(name)
        status = str(app.status).rsplit(".", 1)[-1] if app is not None else "NOT_STARTED"
        if status == "RUNNING":
            return
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RetrievalError(f"dense shard application {name} did not start ({status}): {app.message}")
        if time.monotonic() > deadline:
            raise RetrievalError(f"dense shard application {name} was not running in time ({status}); "
                                 "check that the cluster has shards x retriever.dense.serve_replicas x serve_cpus "
                                 "CPUs free")
        time.sleep(_READY_POLL_S)
