"""After Ctrl-C the summary counts the tool calls that reached the gateway, not only the finished tasks' calls.

A run interrupted while its tasks were running used to print "(none)" under tool calls over the dozens its tasks
had made: the trajectory holds finished tasks alone. The gateway's ledger holds every call; the summary of an
interrupted run adds those of the tasks no record holds, each call once.
"""

from __future__ import annotations

import json

from rich.console import Console

from rollout.report.printed import print_summary
from rollout.report.rescore import RunFacts, ScoringConfig, rescore, score_folder
from rollout.summary import RunSummary, ToolUse
from tests.report.runs import DENSE, SPARSE, gw, make_run, task, tc

STARTED = 1000.0
"""Unix time the interrupted run started; the ledger's earlier lines are an earlier run's."""


def interrupted_run(tmp_path):
    ledger = [
        gw("c0", DENSE, "q0", "w0", 1.0, STARTED - 50),  # an earlier run's unfinished task: not this run's
        gw("c1", DENSE, "q1", "w0", 1.0, STARTED + 1),  # the finished task's call: its record counts it
        gw("c1-lost", DENSE, "q1", "w1", 1.0, STARTED + 0.5),  # its attempt on a worker that died: not a new call
        gw("c2", DENSE, "q2", "w0", 1.0, STARTED + 2, ok=False, outcome="transport_error"),
        gw("c2", DENSE, "q2", "w0", 1.0, STARTED + 3),  # sent again on a new session: one call, its last answer
        gw("c3", SPARSE, "q3#1", "w1", 1.0, STARTED + 4, ok=False, outcome="timeout"),  # repeat 1 of q3
        gw("c4", DENSE, "q4", "w1", 1.0, STARTED + 5),
        {**gw("c5", DENSE, None, None, 1.0, STARTED + 6), "via": "retrieve"},  # a trainer's: no task of this run
        {**gw("c6", DENSE, "s1", None, 1.0, STARTED + 7), "traffic": "train"},
    ]
    return make_run(tmp_path, "run", ledger, [task("q1", "w0", [], [tc("c1", DENSE, 2.0)])], mode="hybrid")


def summary_of(run, **facts) -> RunSummary:
    return score_folder(run, ScoringConfig(mode="hybrid", gateway_file="g.json"), RunFacts(**facts))


def test_the_calls_of_unfinished_tasks_are_counted_once_from_the_ledger(tmp_path):
    run = interrupted_run(tmp_path)
    summary = summary_of(run, complete=False, started_at=STARTED)

    assert summary.n == 1 and summary.tool_calls == {DENSE: ToolUse(1, 0)}
    assert summary.unfinished_calls == {DENSE: ToolUse(2, 0), SPARSE: ToolUse(1, 1)}
    saved = json.loads((run / "evaluation_summary.json").read_text(encoding="utf-8"))
    assert saved["unfinished_tool_calls"] == {DENSE: {"calls": 2, "failed": 0}, SPARSE: {"calls": 1, "failed": 1}}
    assert RunSummary.from_json(saved).unfinished_calls == summary.unfinished_calls

    console = Console(record=True, width=300)
    print_summary(summary, run, console)
    text = console.export_text()
    assert "(none)" not in text
    rows = [[cell.strip() for cell in line.split("│")[1:4]] for line in text.splitlines() if "knowledge" in line]
    assert rows == [[DENSE, "3", "0"], [SPARSE, "1", "1"]]
    assert "Interrupted: 3 of these tool calls were made by tasks that had not finished" in text


def test_a_run_stopped_before_any_task_finished_still_shows_its_calls(tmp_path):
    run = make_run(tmp_path, "run", [gw("c1", DENSE, "q1", "w0", 1.0, STARTED + 1)], [], mode="hybrid")
    summary = summary_of(run, complete=False, started_at=STARTED)
    assert summary.n == 0 and summary.unfinished_calls == {DENSE: ToolUse(1, 0)}


def test_a_finished_run_counts_its_records_alone(tmp_path):
    run = interrupted_run(tmp_path)
    assert summary_of(run, started_at=STARTED).unfinished_calls == {}
    assert "unfinished_tool_calls" not in json.loads((run / "evaluation_summary.json").read_text(encoding="utf-8"))


def test_rescoring_an_interrupted_run_keeps_its_unfinished_calls(tmp_path):
    # `rollout report RUN` (and `report judge`, which rescores) knows no start time: the calls stay as counted.
    run = interrupted_run(tmp_path)
    counted = summary_of(run, complete=False, started_at=STARTED).unfinished_calls
    assert rescore(run).unfinished_calls == counted == {DENSE: ToolUse(2, 0), SPARSE: ToolUse(1, 1)}
