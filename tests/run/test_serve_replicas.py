"""`gateway.replicas=2` on a two-node Ray cluster (one machine): a demo run gives what one gateway gives.

One test covers the scenario end to end, since each run starts a cluster-wide gateway: the same run
with one gateway process and with two Ray Serve replicas (one per node, each reserving the node's only
CPU) must score the same and retrieve the same passages for every task; both replicas serve calls,
each in its own ledger, and every tool call of the trajectory is in exactly one ledger.
"""

from __future__ import annotations

import json

import pytest

from rollout.errors import ConfigError
from rollout.gateway.serve_replica import check_replicable
from rollout.jsonl import iter_jsonl
from rollout.paths import PROJECT_ROOT
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run_folder import ledger_paths, report_path, trajectory_path
from tests.demo_runs import SMALL_KB


def retrieved(run_dir):
    return {t["id"]: [c.get("result_doc_ids") for c in t["tool_calls"]] for t in iter_jsonl(trajectory_path(run_dir))}


@pytest.mark.slow
def test_two_replicas_on_two_nodes_match_one_gateway(two_nodes, tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "cluster-secret")  # the gateway binds the node address
    # The shared demo runs' knowledge base: its indexes are in the session's cache.
    common = ["mode=hybrid", *SMALL_KB, f"ray.address={two_nodes.address}", f"cache_dir={cache_dir}",
              "progress=false"]
    one = run(compose_run_config(*common, f"output_dir={tmp_path / 'one'}"))
    two = run(compose_run_config(*common, f"output_dir={tmp_path / 'two'}", "gateway.replicas=2"))

    assert two.summary.n == one.summary.n == 40
    assert two.summary.metrics == one.summary.metrics
    assert retrieved(two.output_dir) == retrieved(one.output_dir)

    ledgers = ledger_paths(two.output_dir)
    assert len(ledgers) == 2 and all(p.name != "realtime_calls.jsonl" for p in ledgers)
    report = json.loads(report_path(two.output_dir).read_text())
    per_replica = {row["served_by"]: row["total_calls"] for row in report["gateways"]}
    assert len(per_replica) == 2 and all(n > 0 for n in per_replica.values()), per_replica
    # Every call once: the trajectory's call ids are exactly the ledgers' ids, none in two ledgers.
    client_ids = sorted(c["call_id"] for t in iter_jsonl(trajectory_path(two.output_dir)) for c in t["tool_calls"])
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
