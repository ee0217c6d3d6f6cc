"""`gateway.replicas=2` and dense shards on Ray Serve, on a two-node Ray cluster (one machine).

One run covers the scenario end to end, since each run starts a cluster-wide gateway and its shard applications: a
demo run in `mode=hybrid` on two gateway replicas (Ray Serve applications, each replica reserving a quarter of a
node's CPU) whose dense index is two shards, each its own Serve application (`retriever.dense.serve=true`).

- Both replicas serve calls, each in its own ledger, and every tool call of the trajectory is in exactly one ledger.
- The shards land on both nodes. A shard replica killed mid-run fails the calls that needed it (those it did not
  answer within `retriever.dense.serve_timeout_s`) as `upstream_unavailable`: their tasks are recorded as
  infrastructure failures, never answered from the other shard alone, while Serve restarts it; every other task
  ends ok.
- Every call that was answered returned exactly what one gateway's indexes (the flat dense index, BM25) return for
  its query, so the run is the one-gateway run where its calls succeeded: the agent is deterministic given its
  results.
- In a Serve that was running before it, the run deletes the applications it deployed and leaves Serve running.

(`rollout build-index` writing the shards: tests/retrieval/test_ray_build.py; a rerun running a run's infrastructure
failures again: tests/harness/test_faults.py.)
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
def test_replicas_and_shards_on_serve_answer_as_one_index_and_fail_as_infrastructure_when_a_shard_is_down(
        two_nodes, tmp_path, cache_dir, monkeypatch):
    from ray import serve

    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "cluster-secret")  # the gateway binds the node address
    # The shared demo runs' knowledge base: its indexes are in the session's cache.
    common = ["mode=hybrid", *SMALL_KB, f"ray.address={two_nodes.address}", f"cache_dir={cache_dir}", "progress=false",
              "gateway.replicas=2", "gateway.replica_cpus=0.25", "retriever.dense.shards=2",
              "retriever.dense.serve=true", "retriever.dense.serve_cpus=0.25", "workers=2", "concurrency_per_worker=4",
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
    cfg = compose_run_config(*common, "retriever.dense.serve_timeout_s=0.5")
    outcome = run(cfg, on_event=kill_a_shard)
    assert outcome.summary.n == 40
    ray.init(address=two_nodes.address)
    try:
        ray.get_actor(SERVE_CONTROLLER, namespace="serve")  # still running: raises ValueError if the run stopped it
        assert not [name for name in serve.status().applications if name.startswith("rollout-")], \
            "the run deletes the gateway and shard applications it deployed, in the Serve it found running"
    finally:
        serve.shutdown()
        ray.shutdown()

    # The shard down: its calls failed as infrastructure, and only the tasks that made them.
    assert len(killed["nodes"]) == 2, "SPREAD puts the two shards on the two nodes"
    tasks = list(iter_trajectory(outcome.output_dir))
    down = [t for t in tasks if any(c.outcome == "upstream_unavailable" for c in t.tool_calls)]
    assert down, "the calls made while the shard was down failed"
    assert all(t.status == "infra_error" for t in down)  # never scored as answered without that shard's passages
    assert all(t.status == "ok" for t in tasks if t not in down)
    assert all("did not answer" in c.error for t in down for c in t.tool_calls if c.outcome == "upstream_unavailable")

    # Both replicas served, each in its own ledger; every call once: the trajectory's call ids are exactly the
    # ledgers' ids, none in two ledgers, and the ledgers say which failed.
    calls = [c for t in tasks for c in t.tool_calls]
    assert {c.name for c in calls} == {"query_knowledge_base_dense", "query_knowledge_base_sparse"}
    ledgers = ledger_paths(outcome.output_dir)
    assert len(ledgers) == 2 and all(p.name != "realtime_calls.jsonl" for p in ledgers)
    report = json.loads(report_path(outcome.output_dir).read_text())
    per_replica = {row["served_by"]: row["total_calls"] for row in report["gateways"]}
    assert len(per_replica) == 2 and all(n > 0 for n in per_replica.values()), per_replica
    ledger = [line for p in ledgers for line in iter_jsonl(p)]
    assert sorted(line["call_id"] for line in ledger) == sorted(c.call_id for c in calls)
    assert report["summary"]["total_calls"] == len(calls) and report["summary"]["discarded_calls"] == 0
    assert sum(line["outcome"] == "upstream_unavailable" for line in ledger) == sum(
        c.outcome == "upstream_unavailable" for c in calls)

    # Every call answered returned what one gateway's indexes return for its query.
    corpus = open_corpus(ensure_demo_kb(cache_dir, n_passages=400, n_questions=40).corpus_path, cache_dir)
    one = KnowledgeBase(corpus, load_or_build_indexes(corpus, cache_dir, which=["hybrid"], params=RetrievalParams()),
                        default_top_k=cfg.gateway.default_top_k)
    answered = [c for c in calls if c.outcome == "ok"]
    assert len(answered) >= 20
    for call in answered:
        kind = call.name.rsplit("_", 1)[1]
        expected = one.search(kind, call.arguments["query"], call.arguments.get("top_k"))
        assert call.result_ids == [hit.id for hit in expected.results], call.arguments
    one.retrievers["dense"].close()
