"""load_calls: the gateway's lines joined with the trajectory on call_id, robust to broken files."""

from __future__ import annotations

import logging
import math

import pytest

from rollout.errors import NotARunFolderError
from rollout.report import load_calls
from rollout.report.tool_calls.ledger import CALL_COLUMNS
from tests.report.runs import DENSE, GATEWAY_CALLS, TASKS, make_run


def test_rtt_is_joined_on_call_id(tmp_path):
    # Shuffle the trajectory's order so a positional join would give wrong numbers.
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS[::-1], mode="hybrid")
    df = load_calls(run).set_index("call_id")
    assert list(load_calls(run).columns) == list(CALL_COLUMNS)
    assert len(df) == 9
    expected = {"c1": 10.0, "c2": 20.0, "c3": 30.0, "c4": 40.0, "c5": 5.0, "c6": 8.0, "c7": 50.0, "c9": 2.0}
    for call_id, rtt in expected.items():
        assert df.loc[call_id, "rtt_ms"] == rtt
    assert df.loc["c8", "rtt_ms"] == 100.5
    assert df.loc["c1", "arguments"] == {"query": "Alpha  Beta"}
    assert df.loc["c5", "client_outcome"] == "invalid_arguments"
    assert df.loc["c1", "duration_ms"] == 3.0


def test_missing_task_and_worker_ids_come_from_the_trajectory(tmp_path):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    df = load_calls(run).set_index("call_id")
    assert df.loc["c6", "task_id"] == "t2"
    assert df.loc["c6", "worker_id"] == "w1"
    assert df.loc["c6", "gold_doc_ids"] == ["d3"]
    assert df.loc["c8", "gold_doc_ids"] == ["d7"]  # gold comes by task id, even without a call match


def test_mode_from_config_else_folder_name(tmp_path):
    assert set(load_calls(make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid"))["mode"]) == {"hybrid"}
    assert set(load_calls(make_run(tmp_path, "sparse_only", GATEWAY_CALLS, TASKS))["mode"]) == {"sparse_only"}


def test_no_trajectory_gives_gateway_only_rows(tmp_path):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, None, mode="dense")
    df = load_calls(run)
    assert len(df) == 9
    assert df["rtt_ms"].isna().all()
    assert df["gold_doc_ids"].isna().all()
    assert df.set_index("call_id")["task_id"].isna()["c6"]  # nothing to fill it from


@pytest.mark.parametrize("calls", [None, []], ids=["missing", "empty"])
def test_missing_or_empty_calls_file_gives_zero_rows(tmp_path, calls):
    run = make_run(tmp_path, "run_a", calls, [{**t, "tool_calls": []} for t in TASKS], mode="hybrid")
    df = load_calls(run)
    assert len(df) == 0
    assert list(df.columns) == list(CALL_COLUMNS)


def test_half_written_last_line_is_skipped_with_a_warning(tmp_path, caplog):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    with (run / "tool_stats" / "realtime_calls.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"call_id": "c10", "tool_name": "query_knowledge_base_de')
    with (run / "trajectory.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"id": "t4", "tool_calls": [{"call_id": "c10", "na')
    with caplog.at_level(logging.WARNING, logger="rollout.report"):
        df = load_calls(run)
    assert len(df) == 9
    assert "c10" not in set(df["call_id"])
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("realtime_calls.jsonl:10" in m for m in warned)
    assert any("trajectory.jsonl:4" in m for m in warned)


def test_numeric_ids_are_strings(tmp_path):
    calls = [{**GATEWAY_CALLS[0], "task_id": 7, "call_id": 11}]
    tasks = [{**TASKS[0], "id": 7, "tool_calls": [{**TASKS[0]["tool_calls"][0], "call_id": 11}]}]
    df = load_calls(make_run(tmp_path, "run_a", calls, tasks))
    assert df.loc[0, "task_id"] == "7"
    assert df.loc[0, "rtt_ms"] == 10.0
    assert df.loc[0, "tool_name"] == DENSE


def test_a_missing_folder_is_an_error_naming_it(tmp_path):
    with pytest.raises(NotARunFolderError, match="nowhere"):
        load_calls(tmp_path / "nowhere")


def test_every_trajectory_call_is_counted_once_and_discarded_attempts_apart(tmp_path):
    from rollout.report import build_tool_report
    from tests.report.runs import gw, tc

    # Attempt 1 of t1 died with its worker after two calls; attempt 2 is the record the trajectory kept.
    lost = [{**gw("x1", DENSE, "t1", "w0", 1.0, 0.1), "attempt": 1}, {**gw("x2", DENSE, "t1", "w0", 1.0, 0.2), "attempt": 1}]
    resent = {**GATEWAY_CALLS[0], "duration_ms": 4.0}  # c1 again: sent once more after a broken stream
    unrecorded = tc("c10", DENSE, 3.0, query="delta", ok=False, outcome="transport_error")  # never reached the gateway
    tasks = [{**TASKS[0], "attempts": 2}, TASKS[1], {**TASKS[2], "tool_calls": [*TASKS[2]["tool_calls"], unrecorded]}]
    run = make_run(tmp_path, "run_a", [*lost, *GATEWAY_CALLS, resent], tasks, mode="hybrid")
    df = load_calls(run).set_index("call_id")
    assert sorted(df.index) == sorted(c["call_id"] for t in tasks for c in t["tool_calls"])
    assert df.loc["c1", "duration_ms"] == 4.0  # the answer the client got
    assert df.loc["c10", "outcome"] == "transport_error" and math.isnan(df.loc["c10", "duration_ms"])
    assert df.loc["c10", "task_id"] == "t3"
    report = build_tool_report(run)
    assert report["summary"]["total_calls"] == sum(len(t["tool_calls"]) for t in tasks) == 10
    assert report["summary"]["discarded_calls"] == 2
    assert report["discarded_attempts"] == [{"task_id": "t1", "attempt": 1, "calls": 2, "tools": [DENSE]}]
