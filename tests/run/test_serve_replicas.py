"""`gateway.replicas=2` on a two-node Ray cluster (one machine): a demo run gives what one gateway gives.

One test covers the scenario end to end, since each run starts a cluster-wide gateway: a run on two Ray Serve
replicas (one per node, each reserving the node's only CPU) returns for every call what one gateway's indexes return
for its query; both replicas serve calls, each in its own ledger, and every tool call of the trajectory is in exactly
one ledger.

Dense shards on Ray Serve share the module's cluster (and its Serve instance), in one test as well: with
`retriever.dense.serve=true` each shard is its own Serve application; the shards land on both nodes; a shard
replica killed mid-run fails the calls that needed it (those it did not answer within
`retriever.dense.serve_timeout_s`) as `upstream_unavailable` (tasks recorded as infrastructure failures, never
answered from the other shard alone) while Serve restarts it; every call that was answered returned exactly what one
flat index returns; and in a Serve that was running before it, the run deletes the applications it deployed and
leaves Serve running. (`rollout build-index` writing the shards:
tests/retrieval/test_ray_build.py; a rerun running a run's infrastructure failures again:
tests/harness/test_faults.py.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import ray

from rollout.data import ensure_demo_kb, open_corpus
from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.serve_replica import check_replicable
from rollout.jsonl import iter_jsonl
from rollout.paths import PROJECT_ROOT
from rollout.retrieval import RetrievalParams, load_or_build_indexes
from rollout.retrieval.dense_serve import shard_app_name
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run.gateway_serve import SERVE_CONTROLLER
from rollout.run_folder import iter_trajectory, ledger_paths, report_path
from tests.demo_runs import SMALL_KB


@pytest.mark.slow
def test_two_replicas_on_two_nodes_answer_as_one_index(two_nodes, tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "cluster-secret")  # the gateway binds the node address
    # The shared demo runs' knowledge base: its indexes are in the session's cache.
    cfg = compose_run_config("mode=hybrid", *SMALL_KB, f"ray.address={two_nodes.address}", f"cache_dir={cache_dir}",
                             "progress=false", f"output_dir={tmp_path / 'two'}", "gateway.replicas=2")
    two = run(cfg)
    assert two.summary.n == 40 and two.ran == {"ok": 40}

    # Every call returned what one gateway's indexes return for its query, so the run is the one-gateway run: the
    # agent is deterministic given its results.
    corpus = open_corpus(ensure_demo_kb(cache_dir, n_passages=400, n_questions=40).corpus_path, cache_dir)
    one = KnowledgeBase(corpus, load_or_build_indexes(corpus, cache_dir, which=["hybrid"], params=RetrievalParams()),
                        default_top_k=cfg.gateway.default_top_k)
    calls = [c for t in iter_trajectory(two.output_dir) for c in t.tool_calls]
    assert {c.name for c in calls} == {"query_knowledge_base_dense", "query_knowledge_base_sparse"}
    for call in calls:
        kind = call.name.rsplit("_", 1)[1]
        expected = one.search(kind, call.arguments["query"], call.arguments.get("top_k"))
        assert call.result_ids == [hit.id for hit in expected.results], call.arguments
    one.retrievers["dense"].close()

    ledgers = ledger_paths(two.output_dir)
    assert len(ledgers) == 2 and all(p.name != "realtime_calls.jsonl" for p in ledgers)
    report = json.loads(report_path(two.output_dir).read_text())
    per_replica = {row["served_by"]: row["total_calls"] for row in report["gateways"]}
    assert len(per_replica) == 2 and all(n > 0 for n in per_replica.values()), per_replica
    # Every call once: the trajectory's call ids are exactly the ledgers' ids, none in two ledgers.
    client_ids = sorted(c.call_id for c in calls)
    ledger_ids = sorted(line["call_id"] for p in ledgers for line in iter_jsonl(p))
    assert ledger_ids == client_ids
    assert report["summary"]["total_calls"] == len(client_ids) and report["summary"]["discarded_calls"] == 0


def test_replicas_refuse_what_they_cannot_serve(tmp_path):
    with pytest.raises(ConfigError, match="gateway.url"):
        compose_run_config("gateway.replicas=2", "gateway.url=http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigError, match="at least 1"):
        compose_run_config("gateway.replicas=0")
    gateways = PROJECT_ROOT / "conf" / "gateways"
    with pytest.raises(ConfigError, match="streamable-http"):
        check_replicable(["--config", str(gateways / "rag_hybrid.json"), "--transport", "sse"])
    with pytest.raises(ConfigError, match="tool sets"):
        check_replicable(["--config", str(gateways / "rag_dynamic.json")])
    visualize = tmp_path / "visualize.json"
    visualize.write_text(json.dumps({"modules": [{"resource_type": "rag", "tool_groups": ["rag_visualize"]}]}))
    with pytest.raises(ConfigError, match="rag_visualize, which shows each task's last results"):
        check_replicable(["--config", str(visualize)])
    check_replicable(["--config", str(gateways / "rag_hybrid.json")])
    check_replicable(["--config", str(gateways / "rag_pipeline.json")])


def test_serving_shards_needs_gateway_replicas():
    with pytest.raises(ConfigError, match="retriever.dense.serve=true .* set gateway.replicas=2 or more"):
        compose_run_config("retriever.dense.shards=2", "retriever.dense.serve=true")
    with pytest.raises(Exception, match="retriever.dense.serve_replicas=0 must be a positive integer"):
        compose_run_config("retriever.dense.serve_replicas=0")


@pytest.mark.slow
def test_shards_on_serve_fail_as_infrastructure_when_down_and_answer_exactly(two_nodes, tmp_path, cache_dir,
                                                                             monkeypatch):
    from ray import serve

    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "cluster-secret")  # the gateway binds the node address
    common = ["mode=dense", *SMALL_KB, f"ray.address={two_nodes.address}", f"cache_dir={cache_dir}", "progress=false",
              "gateway.replicas=2", "gateway.replica_cpus=0.25", "retriever.dense.shards=2",
              "retriever.dense.serve=true", "retriever.dense.serve_cpus=0.25", "workers=1", "concurrency_per_worker=8",
              f"output_dir={tmp_path / 'run'}"]
    # A shard that has not answered in 0.5 s fails the call: shorter than Serve takes to restart a killed replica.
    killed: dict[str, Any] = {}

    def kill_a_shard(task_id: str, event: object) -> None:
        # Shard 1's replica is killed at the run's first event, before its first call: every call in the seconds
        # Serve takes to bring up another replica (loading the shard) waits 0.5 s and fails.
        if killed:
            return
        apps = sorted(name for name in serve.status().applications if name.startswith("rollout-dense-flat-s2-"))
        (folder,) = {Path(cache_dir) / name[len("rollout-"):].rsplit("-", 1)[0] for name in apps}
        assert apps == [shard_app_name(folder, i) for i in (0, 1)] and folder.is_dir()
        where = [serve.get_app_handle(name).where.remote().result(timeout_s=30) for name in apps]
        killed["nodes"] = {w["node_id"] for w in where}
        os.kill(where[1]["pid"], signal.SIGKILL)

    # Serve runs before the run, as on a shared cluster: the run leaves it running and deletes what it deployed.
    ray.init(address=two_nodes.address)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    ray.shutdown()
    first = run(compose_run_config(*common, "retriever.dense.serve_timeout_s=0.5"), on_event=kill_a_shard)
    assert len(killed["nodes"]) == 2, "SPREAD puts the two shards on the two nodes"
    tasks = list(iter_trajectory(first.output_dir))
    down = [t for t in tasks if any(c.outcome == "upstream_unavailable" for c in t.tool_calls)]
    assert down, "the calls made while the shard was down failed"
    assert all(t.status == "infra_error" for t in down)  # never scored as answered without that shard's passages
    assert all("did not answer" in c.error for t in down for c in t.tool_calls if c.outcome == "upstream_unavailable")
    ledger = [line for p in ledger_paths(first.output_dir) for line in iter_jsonl(p)]
    assert sum(line["outcome"] == "upstream_unavailable" for line in ledger) == sum(
        c.outcome == "upstream_unavailable" for t in tasks for c in t.tool_calls)
    ray.init(address=two_nodes.address)
    try:
        ray.get_actor(SERVE_CONTROLLER, namespace="serve")  # still running: raises ValueError if the run stopped it
        assert not [name for name in serve.status().applications if name.startswith("rollout-")], \
            "the run deletes the gateway and shard applications it deployed, in the Serve it found running"
    finally:
        serve.shutdown()
        ray.shutdown()

    # Every call answered returned what one flat index returns for its query.
    corpus = open_corpus(ensure_demo_kb(cache_dir, n_passages=400, n_questions=40).corpus_path, cache_dir)
    cfg = compose_run_config(*common)
    whole = load_or_build_indexes(corpus, cache_dir, which=["dense"], params=RetrievalParams())["dense"]
    calls = [c for t in tasks for c in t.tool_calls if c.outcome == "ok"]
    assert len(calls) >= 20
    for call in calls:
        hits = whole.search([call.arguments["query"]], int(call.arguments.get("top_k", cfg.gateway.default_top_k)))
        assert call.result_ids == [corpus[int(i)].id for i in hits.indices[0] if i >= 0], call.arguments
