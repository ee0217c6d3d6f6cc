"""`python -m rollout.view`: the task table and its filters, a task's replay, `--follow`, live lines."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from rich.console import Console

from rollout.events import (
    AnyEvent,
    CompletionEvent,
    ErrorEvent,
    Event,
    LLMOutputEvent,
    LLMThinkingEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.view import cli as view
from rollout.view.render import format_live_event
from tests.view.made_runs import task as made_task
from tests.view.made_runs import write_run as write_made_run

T0 = 1_700_000_000.0
DENSE = "query_knowledge_base_dense"


def _call_record(call_id: str, query: str, ok: bool, started: float) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=call_id, name=DENSE, arguments={"query": query, "top_k": 5}, ok=ok,
        outcome="ok" if ok else "tool_error", error=None if ok else "index not loaded",
        started=started, latency_ms=42.0, result_ids=["p1", "p2"] if ok else [],
        result_doc_ids=["p1", "p2"] if ok else [], reached_gateway=True,
    )


def answered() -> TaskResult:
    """Right answer after one dense search, with thinking and a tool result of several lines."""
    events = [
        LLMThinkingEvent(t=T0, turn=1, content="I should search for the founder."),
        LLMOutputEvent(t=T0 + 0.25, turn=1, tool_calls=[{"id": "c1", "name": DENSE, "arguments": {"query": "who founded Acme", "top_k": 5}}],
                       usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}, latency_ms=250.0),
        ToolCallEvent(t=T0 + 0.3, call_id="c1", name=DENSE, arguments={"query": "who founded Acme", "top_k": 5}),
        ToolResultEvent(t=T0 + 0.342, call_id="c1", name=DENSE, ok=True, outcome="ok",
                        text="[p1] Acme\nAcme was founded by Ada Lovelace.\n[p2] Other\nline four\nline five",
                        latency_ms=42.0, result_ids=["p1", "p2", "p3", "p4", "p5"]),
        LLMOutputEvent(t=T0 + 1.5, turn=2, content="Ada Lovelace", latency_ms=1100.0),
        CompletionEvent(t=T0 + 1.5, prediction="Ada Lovelace", turns=2),
    ]
    return TaskResult(
        id="q-001", question="Who founded Acme?", golden_answers=["Ada Lovelace"], prediction="Ada Lovelace",
        tool_calls=[_call_record("c1", "who founded Acme", True, T0 + 0.3)], turns=2, error=None,
        worker_id="worker-0", latency_s=1.5, usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        events=events,
    )


def wrong() -> TaskResult:
    events = [
        LLMOutputEvent(t=T0, turn=1, content="Paris"),
        CompletionEvent(t=T0 + 0.1, prediction="Paris", turns=1),
    ]
    return TaskResult(
        id="q-002", question="Capital of Italy?", golden_answers=["Rome"], prediction="Paris", tool_calls=[],
        turns=1, error=None, worker_id="worker-1", latency_s=0.1, usage={"total_tokens": 30},
        events=events,
    )


def failed() -> TaskResult:
    message = "LLMError: endpoint answered 500 after 3 retries"
    events = [
        ToolCallEvent(t=T0, call_id="c9", name=DENSE, arguments={"query": "x"}),
        ToolResultEvent(t=T0 + 3.0, call_id="c9", name=DENSE, ok=False, outcome="timeout", text="tool call timed out", latency_ms=3000.0),
        ErrorEvent(t=T0 + 3.5, kind="error", message=message),
    ]
    return TaskResult.failed(Question("q-003", "Who wrote X?", ["Y"]), status="error", error=message, turns=1,
                             worker_id="worker-0", latency_s=3.5, events=events, attempts=2)


def timed_out() -> TaskResult:
    message = "task exceeded its time limit of 900 s (task_timeout_s)"
    events = [
        LLMOutputEvent(t=T0, turn=1, tool_calls=[{"id": "c1", "name": DENSE, "arguments": {"query": "slow"}}]),
        ErrorEvent(t=T0 + 900.0, kind="timeout", message=message),
    ]
    return TaskResult.failed(Question("q-004", "Slow one?", ["Z"]), status="timeout", error=message, turns=1,
                             worker_id="worker-1", latency_s=900.0, events=events)


def legacy() -> TaskResult:
    """A record of an older run: no events, only messages and tool calls."""
    messages = [
        {"role": "system", "content": "Answer with the tools."},
        {"role": "user", "content": "Who founded Acme?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
            "name": DENSE, "arguments": json.dumps({"query": "founder of Acme", "top_k": 5})}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "[p1] Acme was founded by Ada Lovelace."},
        {"role": "assistant", "content": "Ada Lovelace"},
    ]
    return TaskResult(
        id="q-005", question="Who founded Acme?", golden_answers=["Ada Lovelace"], prediction="Ada Lovelace",
        tool_calls=[_call_record("x1", "founder of Acme", True, T0)], turns=2, error=None, worker_id="worker-0",
        latency_s=0.4, messages=messages,
    )


TASKS = [answered(), wrong(), failed(), timed_out(), legacy()]


def write_run(folder: Path, tasks: list[TaskResult] = TASKS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trajectory.jsonl").write_text("".join(json.dumps(t.to_json()) + "\n" for t in tasks), encoding="utf-8")
    return folder


def run_view(*argv: str | Path) -> tuple[int, str]:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    code = view.main([str(a) for a in argv], console=console)
    return code, console.file.getvalue()


def row_of(out: str, task_id: str) -> list[str]:
    line = next(line for line in out.splitlines() if f" {task_id} " in line)
    return [cell.strip() for cell in line.strip("│┃ ").split("│")]


def test_table_lists_every_task_with_status_and_em(tmp_path):
    code, out = run_view(write_run(tmp_path / "run"))
    assert code == 0
    cells = {t.id: row_of(out, t.id) for t in TASKS}
    assert cells["q-001"][:7] == ["q-001", "ok", "1", "2", "1", "120", "1.50"]
    assert cells["q-001"][7] == "Ada Lovelace"
    assert cells["q-002"][1:3] == ["ok", "0"]
    assert cells["q-003"][1:3] == ["error", "0"] and "LLMError" in cells["q-003"][7]
    assert cells["q-004"][1:3] == ["timeout", "0"]
    assert cells["q-005"][1:3] == ["ok", "1"] and cells["q-005"][5] == "-"  # no usage recorded
    footer = out.strip().splitlines()[-1]
    assert "5 tasks" in footer and "ok 3" in footer and "error 1" in footer and "timeout 1" in footer
    assert "EM 0.400" in footer and "2 tool calls" in footer


def test_piped_table_prints_long_answers_whole(tmp_path, monkeypatch, capsys):
    # No console passed: the viewer's own, writing to a captured (non-terminal) stdout.
    monkeypatch.setenv("COLUMNS", "60")
    long_answer = " ".join(f"word{i}" for i in range(10))  # as long as the table shows answers (60 chars)
    task = TaskResult(id="q-long", question="?", golden_answers=["x"], prediction=long_answer, tool_calls=[], turns=1,
                      error=None, worker_id="w", latency_s=0.1)
    assert view.main([str(write_run(tmp_path / "run", [task, wrong()]))]) == 0
    out = capsys.readouterr().out
    assert row_of(out, "q-long")[7] == long_answer
    assert "prediction / error" in out


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--status", "error"], ["q-003"]),
        (["--status", "timeout"], ["q-004"]),
        (["--wrong"], ["q-002", "q-003", "q-004"]),
        (["--wrong", "--status", "ok"], ["q-002"]),
        (["--limit", "2"], ["q-001", "q-002"]),
    ],
)
def test_table_filters(tmp_path, args, shown):
    code, out = run_view(write_run(tmp_path / "run"), *args)
    assert code == 0
    assert [t.id for t in TASKS if f" {t.id} " in out] == shown
    assert "5 tasks" in out  # totals stay over the whole file
    assert f"showing {len(shown)} of" in out


def test_table_takes_the_file_and_skips_a_half_written_last_line(tmp_path):
    file = write_run(tmp_path / "run") / "trajectory.jsonl"
    with file.open("a", encoding="utf-8") as f:
        f.write(json.dumps(answered().to_json())[:80])  # the driver is still writing this one
    code, out = run_view(file)
    assert code == 0 and "5 tasks" in out


def test_replay_shows_events_in_order_with_offsets(tmp_path):
    code, out = run_view(write_run(tmp_path / "run"), "--task", "q-001")
    assert code == 0
    assert "Who founded Acme?" in out and "worker-0" in out and "attempts 1" in out
    assert "prompt 100" in out and "total 120" in out
    marks = ["+0.000s think", "I should search", "+0.250s llm", '→ query_knowledge_base_dense {"query":"who founded Acme","top_k":5}',
             "+0.300s call", "+0.342s result", "ok · 42 ms", "5 ids: p1, p2, p3, p4, p5", "Acme was founded by Ada Lovelace.",
             "+1.500s llm", "+1.500s answer", "Ada Lovelace · 2 turns"]
    positions = [out.find(m) for m in marks]
    assert -1 not in positions, [m for m, p in zip(marks, positions) if p == -1]
    assert positions == sorted(positions)
    assert "line five" not in out and "+2 lines" in out  # a long result is cut without --full


def test_replay_full_shows_whole_texts(tmp_path):
    code, out = run_view(write_run(tmp_path / "run"), "--task", "q-001", "--full")
    assert code == 0 and "line five" in out and "+2 lines" not in out


def test_replay_cuts_long_content(tmp_path):
    long = TaskResult(id="long", question="?", golden_answers=["a"], prediction="a", tool_calls=[], turns=1, error=None,
                      worker_id="w", latency_s=0.1, events=[LLMOutputEvent(t=T0, turn=1, content="word " * 500)])
    run = write_run(tmp_path / "run", [long])
    assert "(+2100 chars)" in run_view(run, "--task", "long")[1]
    assert "chars)" not in run_view(run, "--task", "long", "--full")[1]


@pytest.mark.parametrize(
    ("task_id", "expected"),
    [
        ("q-003", ["error", "attempts 2", "+3.000s result", "timeout · 3000 ms", "tool call timed out",
                   "+3.500s error", "error: LLMError: endpoint answered 500 after 3 retries"]),
        ("q-004", ["timeout", "+0.000s llm", "+900.000s error", "timeout: task exceeded its time limit of 900 s"]),
    ],
)
def test_replay_of_failed_tasks_ends_with_the_error(tmp_path, task_id, expected):
    code, out = run_view(write_run(tmp_path / "run"), "--task", task_id)
    assert code == 0
    positions = [out.find(m) for m in expected]
    assert -1 not in positions, [m for m, p in zip(expected, positions) if p == -1]
    assert out.rstrip().splitlines()[-1].lstrip().startswith("+") and "error" in out.rstrip().splitlines()[-1]


def test_replay_without_events_falls_back_to_messages_and_tool_calls(tmp_path):
    code, out = run_view(write_run(tmp_path / "run"), "--task", "q-005")
    assert code == 0
    marks = ["no events in this record", "system", "Answer with the tools.", "user", "assistant",
             '→ query_knowledge_base_dense {"query":"founder of Acme","top_k":5}', "tool [call_0]",
             "Acme was founded by Ada Lovelace.", "\ntool calls", "+0.000s call", "→ ok · 42 ms · 2 ids: p1, p2",
             "answer  Ada Lovelace"]
    positions = [out.find(m) for m in marks]
    assert -1 not in positions, [m for m, p in zip(marks, positions) if p == -1]
    assert positions == sorted(positions)


def test_unknown_task_id_lists_existing_ids(tmp_path, capsys):
    code, out = run_view(write_run(tmp_path / "run"), "--task", "q-01")
    err = capsys.readouterr().err.strip()
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert "no task 'q-01'" in err and "5 tasks" in err and "q-001" in err and "q-002" in err


def test_malformed_line_names_file_and_line(tmp_path, capsys):
    file = write_run(tmp_path / "run") / "trajectory.jsonl"
    lines = file.read_text().splitlines(keepends=True)
    lines.insert(2, '{"id": "broken", "question": \n')
    file.write_text("".join(lines))
    assert run_view(file)[0] == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{file}:3: not a JSON line" in err
    lines[2] = "[1, 2]\n"
    file.write_text("".join(lines))
    assert run_view(file, "--task", "q-004")[0] == 2  # a line not in the driver's layout is read whole
    assert f"{file}:3: not a task record" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["missing", "empty_folder"])
def test_bad_path_is_one_line(tmp_path, capsys, name):
    (tmp_path / "empty_folder").mkdir()
    assert run_view(tmp_path / name)[0] == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and name in err


def test_main_prints_to_stdout(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert view.main([str(run)]) == 0
    assert "q-001" in capsys.readouterr().out
    assert view.main([str(run), "--task", "q-002"]) == 0
    assert "Capital of Italy?" in capsys.readouterr().out


def test_follow_prints_a_line_per_new_task_and_stops_on_ctrl_c(tmp_path):
    run = write_run(tmp_path / "run", TASKS[:2])
    file = run / "trajectory.jsonl"
    new = json.dumps(failed().to_json()) + "\n"
    steps = [new[:50], new[50:], json.dumps(timed_out().to_json()) + "\n"]

    def sleep(_: float) -> None:  # each poll, the "driver" appends a bit more; then Ctrl-C
        if not steps:
            raise KeyboardInterrupt
        with file.open("a", encoding="utf-8") as f:
            f.write(steps.pop(0))

    console = Console(file=io.StringIO(), width=160, color_system=None)
    args = view.build_parser().parse_args([str(run), "--follow"])
    assert view.follow(file, args, console, sleep=sleep) == 0
    lines = console.file.getvalue().strip().splitlines()
    assert "following" in lines[0] and lines[1].startswith("2 tasks")
    assert "q-003" in lines[2] and "error" in lines[2] and "LLMError" in lines[2]
    assert "q-004" in lines[3] and "timeout" in lines[3]
    assert lines[-1].startswith("4 tasks") and len(lines) == 5


def test_follow_waits_for_a_starting_run_and_restarts_when_the_file_is_truncated(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    file = run / "trajectory.jsonl"
    steps = [
        lambda: write_run(run, TASKS[:2]),
        lambda: file.write_text(json.dumps(wrong().to_json()) + "\n"),  # a new run started over
        lambda: None,
    ]

    def sleep(_: float) -> None:
        if not steps:
            raise KeyboardInterrupt
        steps.pop(0)()

    console = Console(file=io.StringIO(), width=160, color_system=None)
    args = view.build_parser().parse_args([str(run), "--follow", "--wrong"])
    assert view.follow(file, args, console, sleep=sleep) == 0
    out = console.file.getvalue()
    assert "truncated" in out and out.count("q-002") == 1 and "q-001" not in out.split("truncated")[1]
    assert out.strip().splitlines()[-1].startswith("1 tasks")


def live(task_id: str, event: AnyEvent) -> str:
    return format_live_event(task_id, event).plain


@dataclass(frozen=True, slots=True, kw_only=True)
class MysteryEvent(Event):
    """An event class the live lines do not know (one added later, say)."""

    type: ClassVar[str] = "mystery"


def test_live_lines_give_the_gist_of_each_event():
    tool_call = live("q-001", ToolCallEvent(t=T0, call_id="c1", name=DENSE, arguments={"query": "who founded X", "top_k": 5}))
    assert "q-001" in tool_call and "call" in tool_call and "dense('who founded X', top_k=5)" in tool_call
    assert ".000 " in tool_call  # milliseconds of the event time
    ok = live("q-001", ToolResultEvent(t=T0, call_id="c1", name=DENSE, ok=True, outcome="ok", text="...", latency_ms=42.4,
                                       result_ids=["a", "b", "c", "d", "e"]))
    assert "→ ok 5 hits 42 ms" in ok
    bad = live("q-001", ToolResultEvent(t=T0, call_id="c1", name=DENSE, ok=False, outcome="timeout", text="took too long", latency_ms=3000))
    assert "→ timeout 3000 ms took too long" in bad
    assert "answer: Paris" in live("q-001", CompletionEvent(t=T0, prediction="Paris", turns=2))
    assert "timeout: task exceeded its time limit of 900 s" in live("q-001", ErrorEvent(t=T0, kind="timeout", message="task exceeded its time limit of 900 s"))
    llm = live("q-001", LLMOutputEvent(t=T0, turn=1, tool_calls=[{"id": "c1", "name": DENSE, "arguments": {"query": "a"}}], latency_ms=812))
    assert "llm" in llm and "calls dense('a')" in llm and "812 ms" in llm
    assert "The answer is near." in live("q-001", LLMOutputEvent(t=T0, turn=2, content="The answer\nis near."))
    assert "think" in live("q-001", LLMThinkingEvent(t=T0, turn=1, content="hmm")) and "hmm" in live("q-001", LLMThinkingEvent(t=T0, turn=1, content="hmm"))


def test_live_lines_are_one_line_and_tolerate_odd_events():
    long_id = "nq_dev_" + "0" * 30 + "123"
    text = format_live_event(long_id, ToolCallEvent(t=T0, call_id="c", name="x", arguments={"query": "q " * 500}))
    assert "\n" not in text.plain and text.plain.split()[1].endswith("0123") and len(text.plain) < 200
    assert "mystery" in format_live_event("q", MysteryEvent(t=T0)).plain  # type: ignore[arg-type]
    # A model's arguments that are not a JSON object stay as it wrote them (the agent keeps them raw).
    cut_off = LLMOutputEvent(t=T0, turn=1, tool_calls=[{"id": "c1", "name": DENSE, "arguments": '{"query": "Arlen'}])
    assert """calls dense('{"query": "Arlen')""" in live("q", cut_off)


def test_the_table_filters_and_counts_infra_errors(tmp_path):
    infra = TaskResult(id="q-006", question="?", golden_answers=["x"], prediction="", tool_calls=[], turns=1,
                       error="gateway down", worker_id="w", latency_s=0.1, status="infra_error")
    code, out = run_view(write_run(tmp_path / "run", [*TASKS, infra]), "--status", "infra_error")
    assert code == 0 and [t for t in ("q-001", "q-006") if f" {t} " in out] == ["q-006"]
    assert "infra_error 1" in out.strip().splitlines()[-2]
    assert "infra_error" not in run_view(write_run(tmp_path / "other"))[1].strip().splitlines()[-1]


def test_table_lists_tasks_in_id_order_with_their_gold(tmp_path):
    """Tasks finish in any order; the table lists them by id, numbers within ids read as numbers."""
    finished = [made_task(q, f"question {q}", f"gold of {q}", f"gold of {q}" if q != "q-10" else "no")
                for q in ("q-10", "q-2", "q-1", "q-9")]
    code, out = run_view(write_made_run(tmp_path / "run", finished))
    assert code == 0
    shown = [line.split("│")[1].strip() for line in out.splitlines() if re.match(r"^│ q-\d+ ", line)]
    assert shown == ["q-1", "q-2", "q-9", "q-10"]
    header = next(line for line in out.splitlines() if "prediction / error" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")][-1] == "gold"
    assert row_of(out, "q-10")[-2:] == ["no", "gold of q-10"]


def test_table_limit_keeps_the_first_tasks_in_id_order(tmp_path):
    finished = [made_task(q, "?", "x", "x") for q in ("q-3", "q-1", "q-2")]
    _, out = run_view(write_made_run(tmp_path / "run", finished), "--limit", "2")
    assert " q-1 " in out and " q-2 " in out and " q-3 " not in out
