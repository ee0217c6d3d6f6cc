"""A gateway replica on Ray Serve logs as every process of a run does: in the one format, to stderr, which Ray
forwards to the run's log (the scenario of a whole run on replicas is tests/run/test_serve_replicas.py)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from ray import serve

from rollout.data.dataset import prepare_data
from rollout.gateway.serve_replica import GatewayReplica
from rollout.run.config import compose_run_config
from rollout.run.gateway_kinds import gateway_args
from tests.demo_runs import SMALL_KB
from tests.test_logs import LOG_LINE


def test_a_replica_s_lines_are_in_the_one_format_on_stderr(tmp_path, cache_dir, monkeypatch, capfd):
    cfg = compose_run_config("mode=sparse", *SMALL_KB, f"cache_dir={cache_dir}", f"output_dir={tmp_path}")
    retriever = tmp_path / "retriever.json"
    retriever.write_text(json.dumps(cfg.retriever.to_dict()), encoding="utf-8")
    argv = gateway_args(cfg.gateway_launch, prepare_data(cfg.dataset, cfg.cache_dir).corpus_path, retriever)
    monkeypatch.setattr(serve, "get_replica_context",
                        lambda: SimpleNamespace(replica_id=SimpleNamespace(unique_id="replica-1")))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = []  # the replica's process starts with none; the configuring closes what it finds
    capfd.readouterr()
    try:
        replica = GatewayReplica([*argv, "--host", "127.0.0.1"], cfg.retriever.to_dict())
        replica.collector.close()
    finally:
        root.handlers[:], root.level = saved
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert any("Gateway replica replica-1 ready" in line for line in lines), lines
    assert any("Registered tool: query_knowledge_base_sparse" in line for line in lines), lines
    assert all(LOG_LINE.match(line) for line in lines), lines
