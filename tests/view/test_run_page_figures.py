"""The run page's figures stay what they were when computed faster: means equal to statistics.mean, the summary
following the run as it grows and as its evaluation summary appears, the tools table of a long report."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

from rollout.records import Question, TaskResult
from rollout.report.scoring import summarize
from rollout.run_folder import (
    append_task,
    read_json,
    report_path,
    trajectory_path,
    write_report,
    write_summary,
)
from rollout.view.pages import REPORT_HEAD, _mean, open_runs, run_summary, tool_table
from tests.view.made_runs import task, write_run


def _same(values: list) -> None:
    ours, theirs = _mean(values), statistics.mean(values)
    assert type(ours) is type(theirs), values
    assert ours == theirs or (math.isnan(ours) and math.isnan(theirs)), values


def test_mean_is_statistics_mean_to_the_last_bit() -> None:
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.choice((1, 2, 3, 7, 50))
        _same([rng.random() for _ in range(n)])
        _same([rng.uniform(-1, 1) * 2.0 ** rng.randint(-1074, 1000) for _ in range(n)])  # partial sums needed
        _same([rng.randint(0, 10**6) for _ in range(n)])
    _same([round(rng.random(), 4) for _ in range(100_000)])
    for values in ([-0.0], [-0.0, -0.0], [5e-324, 5e-324, 5e-324], [1e308, 1e308], [1e-300, 1.0, 1e300, -1e300],
                   [math.inf, 1.0], [math.nan], [2, 4], [2, 5], [True, False], [1, 2.5]):
        _same(values)


def _task(i: int, right: bool) -> TaskResult:
    question = Question(f"q{i}", f"question {i}", [f"answer {i}"])
    # A line longer than the head the index hashes (`HEAD_BYTES`): appending to the file leaves that head as it was.
    messages = [{"role": "user", "content": f"question {i} " + "context " * 600}]
    return TaskResult.answered(question, prediction=f"answer {i}" if right else "no", turns=1, messages=messages,
                               usage={"total_tokens": 10 + i}, calls=[], events=[], worker_id="w", latency_s=0.5 + i)


def test_the_summary_follows_the_run_as_it_grows_and_ends(tmp_path: Path) -> None:
    with trajectory_path(tmp_path).open("w", encoding="utf-8") as f:
        for i in range(3):
            append_task(f, _task(i, right=i < 2))
    run = open_runs([tmp_path])[0]
    first = run_summary(run)
    assert (first.tasks, first.metrics[0].value, first.complete) == (3, 2 / 3, None)

    with trajectory_path(tmp_path).open("a", encoding="utf-8") as f:
        append_task(f, _task(3, right=True))
    assert run.refresh() == 1 and len(run.index) == 4  # extended, not indexed again
    grown = run_summary(run)
    assert (grown.tasks, grown.metrics[0].value, grown.tokens_per_task) == (4, 0.75, 11.5)

    tasks = [_task(i, right=i != 2) for i in range(4)]
    write_summary(tmp_path, summarize(tasks, mode="m", gateway_file="g", wall_time_s=1.0, complete=True,
                                      degraded_tools={"search": "index missing"}))
    ended = run_summary(run)  # the index did not change: the evaluation summary is read all the same
    assert ended.complete is True and ended.degraded_tools == {"search": "index missing"}
    assert ended.tasks == 4 and ended.metrics == grown.metrics


def _report(tools: list[dict], tasks: int, *, tools_first: bool = True) -> dict:
    rows = [{"task_id": f"q{i:07d}", "total_calls": 3, "p50_ms": 12.5, "outcome_ok": 3} for i in range(tasks)]
    if tools_first:
        return {"summary": {"tools_used": [t["tool_name"] for t in tools]}, "tools": tools, "tasks": rows}
    return {"summary": {}, "tasks": rows, "tools": tools}


def test_the_tools_table_of_a_long_report_is_read_from_its_head(tmp_path: Path) -> None:
    tools = [{"tool_name": "search", "total_calls": 9, "success_rate": 1.0, "p50_ms": 3.5, "note": "ü…"},
             {"tool_name": "read", "total_calls": 4, "success_rate": 0.75, "p50_ms": None}]
    with trajectory_path(tmp_path).open("w", encoding="utf-8") as f:
        append_task(f, _task(0, right=True))
    run = open_runs([tmp_path])[0]
    assert tool_table(run) is None  # before the run wrote its report

    path = report_path(tmp_path)
    sizes = []
    for report in (_report(tools, 20_000), _report(tools, 20_000, tools_first=False), _report(tools, 3)):
        write_report(tmp_path, report)
        sizes.append(path.stat().st_size)
        assert tool_table(run) == read_json(path)["tools"] == tools
    assert sizes[0] > REPORT_HEAD and sizes[1] > REPORT_HEAD and sizes[2] < REPORT_HEAD

    path.write_text("[" + json.dumps(_report(tools, 20_000)) + "]", encoding="utf-8")  # long, but not a report
    assert path.stat().st_size > REPORT_HEAD and tool_table(run) is None


def test_the_run_pages_intervals_are_clipped_to_the_range_of_the_scores_as_the_summarys_are(tmp_path: Path) -> None:
    """One right answer in twenty: the t-interval of EM reaches below 0, which no score can be."""
    tasks = [task(f"q{i:02d}", f"question {i}", "yes", "yes" if i == 0 else "no") for i in range(20)]
    [run] = open_runs([write_run(tmp_path / "run", tasks)])
    em = next(m for m in run_summary(run).metrics if m.name == "EM")
    assert em.value == 0.05 and em.ci is not None
    assert em.ci[0] == 0.0 and 0.05 < em.ci[1] <= 1.0
