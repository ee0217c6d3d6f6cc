"""The whole experiment: Hydra config → real gateway process → real Ray actors → results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.client.client import Client

from rollout.export.cli import main as export_main
from rollout.gateway.launch import load_knowledge_base, parse_args
from rollout.gateway.plan import plan_gateway
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.run.identity import tool_hashes
from rollout.run_folder import read_tools, spec_name
from tests.conftest import gateway_on_loopback
from tests.demo_runs import DemoRuns

DENSE, SPARSE = "query_knowledge_base_dense", "query_knowledge_base_sparse"
FUSED = "query_knowledge_base_hybrid"
MODES = ("dense", "sparse", "hybrid", "no_tool", "hybrid_fused", "dynamic", "search_recall")


@pytest.fixture(scope="module")
def runs(demo_runs: DemoRuns) -> dict[str, Path]:
    """One real run per mode on a small generated knowledge base (the session's shared demo runs)."""
    return {mode: demo_runs[mode] for mode in MODES}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tools_in_stats(folder: Path) -> set[str]:
    return {row["tool_name"] for row in read_jsonl(folder / "tool_stats" / "realtime_calls.jsonl")}


def test_each_mode_uses_only_its_tools(runs):
    assert tools_in_stats(runs["dense"]) == {DENSE}
    assert tools_in_stats(runs["sparse"]) == {SPARSE}
    assert tools_in_stats(runs["hybrid"]) == {DENSE, SPARSE}
    assert tools_in_stats(runs["no_tool"]) == set()
    assert tools_in_stats(runs["hybrid_fused"]) == {FUSED}
    assert {"list_toolsets", "activate_toolset"} <= tools_in_stats(runs["dynamic"]) <= {
        "list_toolsets", "activate_toolset", "deactivate_toolset", DENSE, SPARSE}
    assert tools_in_stats(runs["search_recall"]) <= {"search_documents", "recall_documents"}


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid", "no_tool", "dynamic"])
def test_output_folder_contract(runs, mode):
    folder = runs[mode]
    trajectory = read_jsonl(folder / "trajectory.jsonl")
    assert len(trajectory) == 40 and len({t["id"] for t in trajectory}) == 40
    for key in ("id", "question", "golden_answers", "prediction", "tool_calls", "turns", "error"):
        assert key in trajectory[0]
    summary = json.loads((folder / "evaluation_summary.json").read_text())
    assert summary["n"] == 40
    assert set(summary["metrics"]) == {"exact_match", "f1", "contains_answer", "retrieval_recall"}
    report = json.loads((folder / "tool_stats" / "report.json").read_text())
    for row in report["tools"]:
        assert set(row) >= {"tool_name", "total_calls", "success_calls", "failed_calls", "success_rate", "p50_ms", "p95_ms"}
    assert (folder / "config.yaml").read_text().count(f"mode_name: {mode}") == 1


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid", "no_tool", "dynamic", "search_recall"])
def test_tool_stats_count_every_call_in_the_trajectory(runs, mode):
    folder = runs[mode]
    sent = [c for t in read_jsonl(folder / "trajectory.jsonl") for c in t["tool_calls"] if c["reached_gateway"]]
    stats = read_jsonl(folder / "tool_stats" / "realtime_calls.jsonl")
    assert sorted(c["call_id"] for c in sent) == sorted(s["call_id"] for s in stats)
    report = json.loads((folder / "tool_stats" / "report.json").read_text())
    assert report["summary"]["total_calls"] == len(sent)


@pytest.mark.parametrize("mode", ["hybrid", "no_tool", "dynamic"])
def test_the_run_records_the_tool_specs_it_offered_and_exports_its_conversations(runs, mode, tmp_path):
    folder = runs[mode]
    tools = read_tools(folder)
    assert tools is not None and tools.dynamic_toolsets == (mode == "dynamic")
    # The very specs whose hashes the fingerprint holds.
    assert tool_hashes(tools.specs) == json.loads((folder / "fingerprint.json").read_text())["tools"]
    names = [spec_name(s) for s in tools.specs]
    assert set(names) >= {"hybrid": {DENSE, SPARSE}, "no_tool": set(), "dynamic": {"activate_toolset"}}[mode]
    tasks = read_jsonl(folder / "trajectory.jsonl")
    # A dynamic task keeps the tools it was offered, which change as it activates sets.
    assert all((t["offered_tools"] is not None) == (mode == "dynamic") for t in tasks)
    out = tmp_path / "rows.jsonl"
    assert export_main([str(folder), "--format", "openai", "--out", str(out)]) == 0
    answered = [t for t in tasks if t["status"] == "ok" and not t["truncated"]]
    rows = read_jsonl(out)
    assert len(rows) == len(answered) > 30
    for row, task in zip(rows, answered, strict=True):
        assert row["messages"] == task["messages"]
        offered = names if task["offered_tools"] is None else [n for n in names if n in task["offered_tools"]]
        assert [spec_name(s) for s in row.get("tools", [])] == offered


def test_tools_beat_the_no_tool_baseline(runs):
    em = {m: json.loads((f / "evaluation_summary.json").read_text())["metrics"]["exact_match"] for m, f in runs.items()}
    for mode in ("dense", "sparse", "hybrid", "hybrid_fused", "dynamic", "search_recall"):
        assert em[mode] >= em["no_tool"] + 0.3, em


def test_retrieval_recall_is_measured_in_tool_modes(runs):
    for mode in ("dense", "sparse", "hybrid"):
        summary = json.loads((runs[mode] / "evaluation_summary.json").read_text())
        assert summary["metrics"]["retrieval_recall"] > 0.3


async def test_client_lists_exactly_the_gateway_files_tools(runs, cache_dir):
    # The gateway `python -m rollout.gateway --config FILE` serves (the runs above started it as a process), here
    # on loopback in this process, over the runs' corpus and cached indexes.
    corpus = next(cache_dir.glob("demo-400-40-0/corpus.jsonl"))
    for name, expected in [("rag_dense_only.json", [DENSE]), ("rag_hybrid.json", [DENSE, SPARSE])]:
        args = parse_args(["--config", str(GATEWAYS_DIR / name), "--corpus", str(corpus),
                           "--cache-dir", str(cache_dir)])
        kb = load_knowledge_base(args, plan_gateway(load_gateway_file(args.config)).requires)
        try:
            with gateway_on_loopback(args.config, kb) as url:
                async with Client(url) as client:
                    assert [t.name for t in (await client.list_tools()).tools] == expected
        finally:
            kb.retrievers["dense"].close()  # its query-batching thread
