"""build_tool_report / write_tool_report: exact numbers on a hand-built run folder."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from rollout.report import build_tool_report, load_calls, write_tool_report
from tests.report.runs import DENSE, GATEWAY_CALLS, SPARSE, TASKS, accounted, gw, make_run

QS = (50, 95, 99)


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")


def by(rows, key):
    return {r[key]: r for r in rows}


def assert_quantiles(row, server, rtt):
    for q, want in zip(QS, np.percentile(server, QS, method="linear"), strict=True):
        assert row[f"p{q}_ms"] == pytest.approx(want, abs=5e-4)
    for q, want in zip(QS, np.percentile(rtt, QS, method="linear"), strict=True):
        assert row[f"rtt_p{q}_ms"] == pytest.approx(want, abs=5e-4)


def test_counts_and_success_per_tool(run):
    tools = by(build_tool_report(run)["tools"], "tool_name")
    assert sorted(tools) == sorted([DENSE, SPARSE, "fetch_document", "nope"])
    dense, sparse = tools[DENSE], tools[SPARSE]
    assert (dense["total_calls"], dense["success_calls"], dense["failed_calls"]) == (5, 4, 1)
    assert dense["success_rate"] == 0.8
    assert (dense["outcome_ok"], dense["outcome_invalid_arguments"], dense["outcome_timeout"]) == (4, 1, 0)
    assert (sparse["total_calls"], sparse["success_calls"], sparse["success_rate"]) == (2, 1, 0.5)
    assert (sparse["outcome_ok"], sparse["outcome_timeout"]) == (1, 1)
    assert sparse["rtt_calls"] == 2
    assert tools["nope"]["outcome_unknown_tool"] == 1
    assert tools["fetch_document"]["success_rate"] == 1.0


def test_quantiles_match_numpy_linear_percentiles(run):
    tools = by(build_tool_report(run)["tools"], "tool_name")
    assert_quantiles(tools[DENSE], [3.0, 5.0, 7.0, 0.5, 4.0], [10.0, 30.0, 40.0, 5.0, 50.0])
    assert_quantiles(tools[SPARSE], [1.0, 100.0], [20.0, 100.5])
    summary = build_tool_report(run)["summary"]
    assert_quantiles(summary, [c["duration_ms"] for c in GATEWAY_CALLS], [10, 20, 30, 40, 5, 8, 50, 100.5, 2])


def test_counts_per_task_worker_and_mode(run):
    report = build_tool_report(run)
    tasks = by(report["tasks"], "task_id")
    assert {t: r["total_calls"] for t, r in tasks.items()} == {"t1": 3, "t2": 4, "t3": 2}
    assert (tasks["t2"]["failed_calls"], tasks["t2"]["success_rate"]) == (2, 0.5)
    assert_quantiles(tasks["t1"], [3.0, 1.0, 5.0], [10.0, 20.0, 30.0])
    workers = by(report["workers"], "worker_id")
    assert {w: r["total_calls"] for w, r in workers.items()} == {"w0": 3, "w1": 6}
    assert workers["w1"]["success_calls"] == 3
    assert [m["mode"] for m in report["modes"]] == ["hybrid"]
    assert report["modes"][0]["total_calls"] == 9
    assert report["modes"][0]["success_rate"] == round(6 / 9, 4)


def test_summary_totals(run):
    s = build_tool_report(run)["summary"]
    assert (s["total_calls"], s["success_calls"], s["failed_calls"]) == (9, 6, 3)
    assert s["success_rate"] == round(6 / 9, 4)
    assert s["mode"] == "hybrid" and s["has_trajectory"] is True
    assert s["outcomes"] == {"invalid_arguments": 1, "ok": 6, "timeout": 1, "unknown_tool": 1}
    assert (s["tasks_with_calls"], s["workers_with_calls"], s["rtt_calls"]) == (3, 2, 9)
    assert s["discarded_calls"] == 0
    assert s["tools_used"] == sorted([DENSE, SPARSE, "fetch_document", "nope"])


def test_hit_at_k_by_hand(run):
    report = build_tool_report(run)
    retrieval = by(report["retrieval"], "tool_name")
    assert sorted(retrieval) == [DENSE, SPARSE]  # fetch_document and nope return no ids
    dense = retrieval[DENSE]
    # Scored: c1 [d9,d1,d2]/d1, c3 [d5..d8,d1,d2]/d1, c4 [d4..d9,d3]/d3, c7 [p7#0 (doc d7), p2#1]/d7.
    assert (dense["retrieval_calls"], dense["scored_calls"]) == (5, 4)
    assert (dense["hit_at_1"], dense["hit_at_3"], dense["hit_at_5"], dense["hit_at_all"]) == (0.25, 0.5, 0.75, 1.0)
    assert dense["mean_returned"] == 4.5
    sparse = retrieval[SPARSE]
    assert (sparse["retrieval_calls"], sparse["scored_calls"], sparse["hit_at_1"]) == (2, 1, 1.0)
    overall = report["summary"]["retrieval"]
    assert (overall["retrieval_calls"], overall["scored_calls"]) == (7, 5)
    assert (overall["hit_at_1"], overall["hit_at_3"], overall["hit_at_5"], overall["hit_at_all"]) == (0.4, 0.6, 0.8, 1.0)


def test_repeated_query_share_by_hand(run):
    report = build_tool_report(run)
    dense = by(report["retrieval"], "tool_name")[DENSE]
    # t1: "Alpha  Beta" then " alpha beta " (repeat); t2: "gamma" then "GAMMA" (repeat, though it failed);
    # t3: "Gamma" is another task. c2 asks t1's query of another tool: not a repeat.
    assert (dense["query_calls"], dense["repeated_calls"], dense["repeated_query_share"]) == (5, 2, 0.4)
    sparse = by(report["retrieval"], "tool_name")[SPARSE]
    assert (sparse["query_calls"], sparse["repeated_calls"], sparse["repeated_query_share"]) == (1, 0, 0.0)
    overall = report["summary"]["retrieval"]
    assert (overall["query_calls"], overall["repeated_calls"], overall["repeated_query_share"]) == (6, 2, 0.3333)


def test_without_trajectory_rtt_and_hits_are_null(tmp_path):
    report = build_tool_report(make_run(tmp_path, "run_a", GATEWAY_CALLS, None, mode="hybrid"))
    s = report["summary"]
    assert (s["total_calls"], s["success_calls"], s["has_trajectory"]) == (9, 6, False)
    assert s["rtt_p50_ms"] is None and s["rtt_calls"] == 0
    dense = by(report["retrieval"], "tool_name")[DENSE]
    assert dense["scored_calls"] == 0
    assert dense["hit_at_1"] is None and dense["hit_at_all"] is None
    assert dense["repeated_query_share"] is None
    assert by(report["tools"], "tool_name")[DENSE]["rtt_p95_ms"] is None
    assert by(report["tasks"], "task_id")[None]["total_calls"] == 1  # c6 arrived without a task id


@pytest.mark.parametrize("calls", [None, []], ids=["missing", "empty"])
def test_zero_calls_report(tmp_path, calls):
    run = make_run(tmp_path, "run_a", calls, [{**t, "tool_calls": []} for t in TASKS], mode="no_tool")
    out = write_tool_report(run)
    report = json.loads(out.read_text())
    assert report["summary"]["total_calls"] == 0
    assert report["summary"]["success_rate"] is None
    assert report["tools"] == [] and report["tasks"] == [] and report["retrieval"] == []
    assert report["modes"][0]["mode"] == "no_tool" and report["modes"][0]["total_calls"] == 0
    assert list(pd.read_csv(run / "tool_stats" / "tools.csv").columns)[:3] == ["tool_name", "total_calls", "success_calls"]


def test_half_written_last_line_never_fails(run):
    with (run / "tool_stats" / "realtime_calls.jsonl").open("a") as f:
        f.write('{"call_id": "c10", "tool_name": "query_kn')
    assert build_tool_report(run)["summary"]["total_calls"] == 9


def test_report_json_keeps_the_contract_and_csvs_match(run):
    out = write_tool_report(run)
    assert out == run / "tool_stats" / "report.json"
    report = json.loads(out.read_text())
    assert set(report) == {"summary", "tools", "tasks", "workers", "modes", "gateways", "retrieval", "discarded_attempts"}
    assert [(r["served_by"], r["total_calls"]) for r in report["gateways"]] == [("gateway", 9)]
    for row in report["tools"]:
        assert {"tool_name", "total_calls", "success_calls", "failed_calls", "success_rate", "p50_ms", "p95_ms"} <= set(row)
    assert all("task_id" in row for row in report["tasks"])
    for name, key in (("tools", "tool_name"), ("tasks", "task_id"), ("workers", "worker_id"), ("retrieval", "tool_name")):
        csv = pd.read_csv(run / "tool_stats" / f"{name}.csv")
        assert list(csv.columns) == list(report[name][0])
        assert csv[key].tolist() == [r[key] for r in report[name]]
        assert csv["total_calls" if name != "retrieval" else "retrieval_calls"].sum() == sum(
            r["total_calls" if name != "retrieval" else "retrieval_calls"] for r in report[name]
        )


def test_an_outcome_outside_the_known_set_gets_its_own_column(run):
    with (run / "tool_stats" / "realtime_calls.jsonl").open("a") as f:  # c1 again: its last record counts
        f.write(json.dumps({**GATEWAY_CALLS[0], "ok": False, "outcome": "overloaded"}) + "\n")
    tools = by(build_tool_report(run)["tools"], "tool_name")
    assert tools[DENSE]["outcome_overloaded"] == 1 and tools[SPARSE]["outcome_overloaded"] == 0
    assert tools[DENSE]["failed_calls"] == 2


def test_replica_ledgers_are_read_together_and_counted_per_replica(run):
    """A Ray Serve gateway's replicas each keep a ledger: the report is the one a single ledger gives, plus
    the calls each replica served; a call sent again and answered by the other replica counts once, last answer."""
    single = build_tool_report(run)
    ledger = run / "tool_stats" / "realtime_calls.jsonl"
    lines = ledger.read_text().splitlines()
    ledger.unlink()
    (run / "tool_stats" / "realtime_calls.r1.jsonl").write_text("\n".join(lines[0::2]) + "\n")
    retried = {**json.loads(lines[0]), "ok": False, "outcome": "timeout", "timestamp": 1e12}
    (run / "tool_stats" / "realtime_calls.r2.jsonl").write_text("\n".join([*lines[1::2], json.dumps(retried)]) + "\n")
    report = build_tool_report(run)
    assert [(r["served_by"], r["total_calls"]) for r in report["gateways"]] == [("r1", 4), ("r2", 5)]
    assert report["summary"]["total_calls"] == single["summary"]["total_calls"] == 9
    assert report["summary"]["failed_calls"] == single["summary"]["failed_calls"] + 1  # the later answer counts
    assert by(report["tasks"], "task_id").keys() == by(single["tasks"], "task_id").keys()


# Context tokens of the calls whose ledger line has accounting; c5 (refused before its tool ran) and c8 (timed
# out), like the fetch_document and unknown-tool calls, have none and are left out of the token figures.
CONTEXT = {"c1": 100, "c3": 200, "c4": 400, "c7": 1000, "c2": 50}


@pytest.fixture
def accounted_run(tmp_path):
    calls = [accounted(c, CONTEXT[c["call_id"]], prompt=30 if c["call_id"] == "c2" else 0,
                       completion=10 if c["call_id"] == "c2" else 0) if c["call_id"] in CONTEXT else c
             for c in GATEWAY_CALLS]
    return make_run(tmp_path, "run_a", calls, TASKS, mode="hybrid")


def test_context_tokens_per_call_are_over_the_calls_that_reported_accounting(accounted_run):
    report = build_tool_report(accounted_run)
    tools = by(report["tools"], "tool_name")
    dense = tools[DENSE]
    # 100, 200, 400, 1000: linear p50 halfway between 200 and 400; p95 at 2.85 of 3 steps, 400 + 0.85 · 600.
    assert (dense["total_calls"], dense["accounted_calls"]) == (5, 4)
    assert (dense["context_tokens_mean"], dense["context_tokens_p50"], dense["context_tokens_p95"]) == (425.0, 300.0, 910.0)
    assert dense["llm_tokens_mean"] == 0.0
    sparse = tools[SPARSE]
    assert (sparse["accounted_calls"], sparse["context_tokens_p50"], sparse["context_tokens_p95"]) == (1, 50.0, 50.0)
    assert sparse["llm_tokens_mean"] == 40.0  # its own LLM: 30 prompt + 10 completion tokens
    for name in ("fetch_document", "nope"):
        assert tools[name]["accounted_calls"] == 0
        assert tools[name]["context_tokens_p50"] is None and tools[name]["llm_tokens_mean"] is None
    s = report["summary"]
    # 50, 100, 200, 400, 1000: p95 at 3.8 of 4 steps, 400 + 0.8 · 600.
    assert (s["accounted_calls"], s["context_tokens_mean"], s["context_tokens_p50"], s["context_tokens_p95"]) == (
        5, 350.0, 200.0, 880.0)
    assert s["llm_tokens_mean"] == 8.0
    assert report["modes"][0]["context_tokens_p95"] == 880.0


def test_a_ledger_without_accounting_reports_no_token_figures(run):
    s = build_tool_report(run)["summary"]
    assert (s["accounted_calls"], s["context_tokens_mean"], s["context_tokens_p50"], s["llm_tokens_mean"]) == (
        0, None, None, None)


def test_a_trainers_calls_in_a_run_folder_are_counted_not_discarded(tmp_path):
    """A ledger line no trajectory call made is a discarded attempt's, unless a trainer sent it (traffic=train)."""
    trainer = {**gw("x1", DENSE, "s1", None, 3.0, 20.0, ids=["d1"]), "traffic": "train", "step": 5}
    thrown_away = gw("x2", DENSE, "t1", "w0", 3.0, 21.0, ids=["d1"])
    run = make_run(tmp_path, "run_a", [*GATEWAY_CALLS, trainer, thrown_away], TASKS, mode="hybrid")
    summary = build_tool_report(run)["summary"]
    assert (summary["total_calls"], summary["discarded_calls"]) == (10, 1)
    calls = load_calls(run).set_index("call_id")
    assert (calls.loc["x1", "traffic"], calls.loc["x1", "step"]) == ("train", 5)
    assert calls.loc["c1", "traffic"] is None and calls["step"].isna().sum() == 9
