"""Repeated calls and turns are counted exactly, per task and per run, in the evaluation summary (also when an old run
folder is rescored), the tool report and the comparison; most tasks looping is a warning with what to try."""

from __future__ import annotations

import csv
import json
import re

import pytest
from rich.console import Console

from rollout.repetition import arguments_key, task_repeats
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.tables import comparison_tables, write_comparison
from rollout.report.printed import print_summary
from rollout.report.rescore import rescore
from rollout.report.scoring import summarize
from rollout.report.tool_calls.report import build_tool_report
from rollout.run.config import compose_run_config
from rollout.summary import RunSummary
from tests.report.loops import GET_DOCUMENT, SEARCH, clean, loops, native, search_r1, thinks, write_run

LOOPING = "3 of 4 tasks (75%) repeat themselves"


def summary_of(tasks, **kwargs) -> RunSummary:
    return summarize(tasks, mode="sparse", gateway_file="g.json", wall_time_s=1.0, **kwargs)


def test_arguments_are_compared_normalised_and_every_argument_counts():
    assert arguments_key({"query": "Who  founded\nACME ", "top_k": 5}) == arguments_key({"top_k": 5.0,
                                                                                        "query": "who founded acme"})
    assert arguments_key({"query": "acme", "top_k": 5}) != arguments_key({"query": "acme", "top_k": 10})
    assert arguments_key({"filters": ["A", "b"]}) != arguments_key({"filters": ["b", "a"]})  # lists keep their order
    assert arguments_key('{"query": "ACME"') == arguments_key('{"query":  "acme"')  # text a model wrote, as a string


@pytest.mark.parametrize(("task", "calls", "turns"), [
    (search_r1, {1: 0, 2: 0}, (2, 3)),
    (native, {1: 0}, ()),  # top_k 10, and another tool with the same arguments, are other calls
    (thinks, {}, (2,)),
    (clean, {}, ()),
], ids=["search_r1", "native", "thinks", "clean"])
def test_each_tasks_repeats_are_known_by_hand(task, calls, turns):
    repeats = task_repeats(task())
    assert (repeats.repeats_of, repeats.repeated_turns, repeats.loops) == (calls, turns, bool(calls or turns))


def test_a_task_repeating_another_repeats_call_is_no_repeat():
    tasks = [clean("q1", repeat=0), clean("q1", repeat=1), clean("q2")]  # one call each, the same arguments
    assert summary_of(tasks).repeated_calls.to_json() == {
        "count": 0, "share": 0.0, "calls": 3, "tasks_with_repeated_calls": 0, "repeated_turns": 0, "turns": 6,
        "tasks_with_repeated_turns": 0, "looping_tasks": 0, "looping_share": 0.0, "tasks": 3}


def test_the_summary_counts_them_and_reads_them_back():
    summary = summary_of(loops())
    data = summary.to_json()
    assert data["repeated_calls"] == {
        "count": 3, "share": 0.375, "calls": 8, "tasks_with_repeated_calls": 2, "repeated_turns": 3, "turns": 13,
        "tasks_with_repeated_turns": 2, "looping_tasks": 3, "looping_share": 0.75, "tasks": 4}
    assert RunSummary.from_json(json.loads(json.dumps(data))) == summary
    del data["repeated_calls"]  # a summary written before they were counted
    assert RunSummary.from_json(data).repeated_calls is None


def test_most_tasks_looping_is_a_warning_with_what_to_try(tmp_path):
    [warning] = [w for w in summary_of(loops()).warnings if "repeat themselves" in w]
    assert warning.startswith(LOOPING)
    assert "3 of 8 tool calls repeat an earlier call of their task" in warning and "3 turns are the same" in warning
    for fix in ("llm.sampling.temperature=0.7", "+llm.sampling.repetition_penalty=1.1", "+llm.sampling.repeat_penalty",
                "agent.max_turns", "rollout view RUN --task ID"):
        assert fix in warning
    console = Console(record=True, width=400)
    print_summary(summary_of(loops()), tmp_path, console)
    assert f"Warning: {warning}" in console.export_text()


def test_the_overrides_the_warning_names_compose_as_written():
    [warning] = [w for w in summary_of(loops()).warnings if "repeat themselves" in w]
    overrides = re.findall(r"\+?llm\.sampling\.\w+=[\d.]+", warning)
    assert len(overrides) == 4
    for override in overrides:
        key, value = override.lstrip("+").removeprefix("llm.sampling.").split("=")
        cfg = compose_run_config("agent=openai", "llm.model=m", override)
        assert cfg.llm["sampling"][key] == float(value)


def test_half_the_tasks_looping_or_a_deterministic_agent_is_no_warning():
    half = [search_r1(), thinks(), clean("q1"), clean("q2")]  # 2 of 4: not over half
    assert summary_of(half).repeated_calls.looping_tasks == 2
    assert not [w for w in summary_of(half).warnings if "repeat themselves" in w]
    # A stand-in agent that repeats by design: no sampling setting would change it.
    assert not [w for w in summary_of(loops(), deterministic_agent=True).warnings if "repeat themselves" in w]


def test_rescoring_an_old_run_folder_counts_them_from_its_trajectory(tmp_path):
    folder = write_run(tmp_path / "run", loops())
    old = summary_of([]).to_json() | {"wall_time_s": 9.0, "deterministic_agent": False}
    del old["repeated_calls"]
    (folder / "evaluation_summary.json").write_text(json.dumps(old), encoding="utf-8")
    summary = rescore(folder)
    assert (summary.repeated_calls.count, summary.repeated_calls.repeated_turns) == (3, 3)
    assert any(w.startswith(LOOPING) for w in summary.warnings)
    written = json.loads((folder / "evaluation_summary.json").read_text(encoding="utf-8"))
    assert written["repeated_calls"]["count"] == 3 and written["wall_time_s"] == 9.0


def test_the_tool_report_counts_them_per_tool_and_task(tmp_path):
    report = build_tool_report(write_run(tmp_path / "run", [*loops(), clean("clean", repeat=1)]))
    tools = {r["tool_name"]: r for r in report["tools"]}
    assert (tools[SEARCH]["total_calls"], tools[SEARCH]["repeated_calls"], tools[SEARCH]["repeated_call_share"]) == \
        (8, 3, 0.375)
    assert (tools[GET_DOCUMENT]["repeated_calls"], tools[GET_DOCUMENT]["repeated_call_share"]) == (0, 0.0)
    tasks = {r["task_id"]: r["repeated_calls"] for r in report["tasks"]}
    assert tasks == {"search_r1": 2, "native": 1, "clean": 0}  # clean's two repeats ask the same: no repeat
    assert (report["summary"]["total_calls"], report["summary"]["repeated_calls"]) == (9, 3)
    # The query alone: native's 2nd and 3rd calls ask its 1st's query (top_k aside), of the same tool.
    retrieval = {r["tool_name"]: r for r in report["retrieval"]}
    assert (retrieval[SEARCH]["query_calls"], retrieval[SEARCH]["repeated_calls"]) == (8, 4)


def test_the_comparison_has_a_column_for_them(tmp_path):
    looping = write_run(tmp_path / "runs" / "looping", loops(), mode="looping")
    steady = write_run(tmp_path / "runs" / "steady", [clean("q1"), native()], mode="steady")
    comparison = compare_runs([looping, steady])
    assert [(r.repeated_calls, r.repeated_call_share, r.repeated_turns, r.looping_tasks) for r in comparison.rows] == \
        [(3, 0.375, 3, 3), (1, 0.2, 0, 1)]
    _, headers, rows = comparison_tables(comparison)[0]
    column = headers.index("repeated calls")
    assert [row[column] for row in rows] == ["3 (38%)", "1 (20%)"]
    write_comparison(comparison, tmp_path / "out")
    with (tmp_path / "out" / "comparison.csv").open(encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert [(r["repeated_calls"], r["repeated_turns"], r["looping_tasks"]) for r in table] == [("3", "3", "3"),
                                                                                                ("1", "0", "1")]
