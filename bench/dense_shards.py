"""A flat dense index served whole and in 2 shards on a local two-node Ray cluster, side by side in one run.

    python bench/dense_shards.py                 # 2,000,000 x 768 float32 (a 5.7 GiB flat index)
    python bench/dense_shards.py --smoke         # 20,000 x 64, a few seconds of searching

The random unit vectors are generated once into `--cache-dir` (default ~/.cache/rollout-bench/dense-shards) as the
1-shard layout (`rollout.retrieval.dense_shards`, one shard holding every row), then split once into the 2-shard
layout. A two-node cluster is made on this machine (`ray.cluster_utils.Cluster`: a head and a second node, each
with `--node-cpus` CPUs), both layouts are deployed on its Serve (`rollout.retrieval.dense_serve`: each shard an
application of one replica reserving one CPU, so faiss searches on one thread in each replica, as on a node of one
core per shard), and searched from here through Serve handles, as a gateway searches them:

- q/s at 1, 16 and 512 queries a request (k = 10), the layouts interleaved request by request, so load from other
  work on the machine falls on both alike;
- each node's resident memory: the RSS of the layout's shard replicas on that node after the searches (a flat
  search reads every row, so every mapped page of a shard is resident in its replica);
- whether the two layouts returned the same rows and scores for every query (bit for bit).

The load average before and after is printed: compare the layouts within one run only.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import faiss
import numpy as np
import ray
from ray import serve
from ray.cluster_utils import Cluster

from rollout.retrieval.base import Hits
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.dense_serve import delete_applications, deploy_shards, served_shards, shard_app_name
from rollout.retrieval.dense_shards import read_shards_meta, shard_dir, split_index_into, write_shards_meta
from rollout.retrieval.params import DenseParams

K = 10
BATCHES = (1, 16, 512)
GENERATE_CHUNK = 100_000


class _Vectors:
    """Stands in for the encoder: the layouts are searched with query vectors."""

    passage_prefix = ""

    def __init__(self, dimension: int) -> None:
        self.model_id = f"random-unit-{dimension}"
        self.dimension = dimension


def _loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    rows = rng.standard_normal((n, d), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def whole_layout(cache: Path, n: int, d: int) -> Path:
    """The 1-shard layout of n random d-wide unit rows, generated once (in chunks; the index is built in memory)."""
    folder = cache / f"flat-{n}x{d}-s1"
    if (folder / "meta.json").is_file():
        return folder
    print(f"generating {n:,} x {d} unit vectors into {folder} (once)", flush=True)
    rng = np.random.default_rng(0)
    index = faiss.IndexFlatIP(d)
    for start in range(0, n, GENERATE_CHUNK):
        index.add(_unit_rows(rng, min(GENERATE_CHUNK, n - start), d))
    tmp = folder.with_name(folder.name + ".tmp")
    DenseRetriever(index, None).save(tmp / shard_dir(0))
    del index
    write_shards_meta(tmp, [(0, n)], _Vectors(d), index="flat", dimension=d, labelled=False)
    tmp.rename(folder)
    return folder


def split_layout(cache: Path, whole: Path, shards: int) -> Path:
    """The `shards`-shard layout of the same rows, split once from the whole one (one shard in memory at a time)."""
    folder = whole.with_name(whole.name.replace("-s1", f"-s{shards}"))
    if (folder / "meta.json").is_file():
        return folder
    d = int(read_shards_meta(whole)["dimension"])
    tmp = folder.with_name(folder.name + ".tmp")
    mapped = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
    source = faiss.read_index(str(whole / shard_dir(0) / "index.faiss"), mapped)
    split_index_into(tmp, source, str(whole), encoder=_Vectors(d),
                     params=DenseParams(shards=shards, max_query_batch=1)).close()
    tmp.rename(folder)
    return folder


def _replicas(folder: Path) -> list[dict]:
    meta = read_shards_meta(folder)
    return [serve.get_app_handle(shard_app_name(folder, i)).where.remote().result()
            for i in range(len(meta["shards"]))]


def _rss_by_node(replicas: list[dict], nodes: list[str]) -> list[float]:
    """GiB resident in the layout's replicas on each node."""
    per_node = dict.fromkeys(nodes, 0.0)
    for replica in replicas:
        per_node[replica["node_id"]] += _rss_kib(replica["pid"]) / 2**20
    return [per_node[node] for node in nodes]


def _rss_kib(pid: int) -> int:
    """VmRSS of a process of this machine (both nodes run here)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=2_000_000)
    parser.add_argument("--dimension", type=int, default=768)
    parser.add_argument("--rounds", type=int, nargs=3, default=(20, 6, 1), metavar=("B1", "B16", "B512"),
                        help="requests per layout at 1, 16 and 512 queries a request")
    parser.add_argument("--node-cpus", type=int, default=2, help="CPUs each of the two nodes declares")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "rollout-bench" / "dense-shards")
    parser.add_argument("--smoke", action="store_true", help="20,000 x 64 vectors and few requests")
    args = parser.parse_args()
    if args.smoke:
        args.vectors, args.dimension, args.rounds = 20_000, 64, (4, 2, 1)
    n, d = args.vectors, args.dimension
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    load_before = _loadavg()
    layouts = {"1 shard": whole_layout(args.cache_dir, n, d)}
    layouts["2 shards"] = split_layout(args.cache_dir, layouts["1 shard"], 2)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.node_cpus, "include_dashboard": False})
    cluster.add_node(num_cpus=args.node_cpus)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    params = DenseParams(serve=True, serve_cpus=1.0, serve_timeout_s=3600.0, max_query_batch=1)
    apps: list[str] = []
    try:
        started = time.perf_counter()
        retrievers = {}
        for name, folder in layouts.items():
            apps += deploy_shards(folder, params)
            retrievers[name] = served_shards(folder, encoder=None, params=params)
        print(f"deployed both layouts in {time.perf_counter() - started:.1f} s", flush=True)
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        rng = np.random.default_rng(1)
        seconds = {name: dict.fromkeys(BATCHES, 0.0) for name in layouts}
        answers: dict[str, list[Hits]] = {name: [] for name in layouts}
        asked = 0
        for batch, rounds in zip(BATCHES, args.rounds, strict=True):
            for _ in range(rounds):
                queries = _unit_rows(rng, batch, d)
                asked += batch
                for name, retriever in retrievers.items():
                    t0 = time.perf_counter()
                    answers[name].append(retriever.search_vectors(queries, K))
                    seconds[name][batch] += time.perf_counter() - t0
        identical = all(np.array_equal(a.indices, b.indices) and np.array_equal(a.scores, b.scores)
                        for a, b in zip(answers["1 shard"], answers["2 shards"], strict=True))

        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        print(f"\n{n:,} x {d} float32 unit vectors, flat index of {n * d * 4 / 2**20:,.0f} MiB; two Ray nodes on one "
              f"machine ({os.cpu_count()} cores, {memory:.0f} GiB), k = {K}")
        print(f"{'layout':<9} | {'replicas: node, faiss threads':<30} | {'RSS node A':>10} | {'RSS node B':>10} | "
              + " | ".join(f"{f'q/s b{b}':>9}" for b in BATCHES))
        for name, folder in layouts.items():
            replicas = _replicas(folder)
            placed = ", ".join(f"{'AB'[nodes.index(r['node_id'])]} {r['threads']}" for r in replicas)
            rss = _rss_by_node(replicas, nodes)
            rates = [rounds * batch / seconds[name][batch] for batch, rounds in zip(BATCHES, args.rounds,
                                                                                    strict=True)]
            print(f"{name:<9} | {placed:<30} | {rss[0]:>6.2f} GiB | {rss[1]:>6.2f} GiB | "
                  + " | ".join(f"{rate:>9.2f}" for rate in rates))
        ratios = [seconds["1 shard"][b] / seconds["2 shards"][b] for b in BATCHES]
        print("q/s ratio, 2 shards / 1 shard: "
              + ", ".join(f"b{b} {r:.2f}x" for b, r in zip(BATCHES, ratios, strict=True)))
        print(f"identical rows and scores for all {asked} queries: {'yes' if identical else 'NO'}")
        print(f"/proc/loadavg before: {load_before}, after: {_loadavg()}")
        if not identical:
            raise SystemExit(1)
    finally:
        delete_applications(apps)
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
