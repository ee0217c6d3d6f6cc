"""Tasks that repeat themselves as small models do, with their repeats known by hand, and run folders of them.

`LOOPS` holds four tasks of one run:
- `search_r1`: the search_r1 protocol's loop: the same `<search>` turn three times, until out of turns: 3 calls, the
  2nd and 3rd repeating the 1st; turns 2 and 3 the same as the one before.
- `native`: native tool calls: the 2nd call asks the 1st's query again, cased and spaced otherwise and with top_k 5.0
  for 5 (a repeat: normalised, they are the same); the 3rd asks it with top_k 10 (not a repeat), the 4th of another tool
  with the 3rd's arguments (not a repeat). No turn repeats (the 2nd has its own text).
- `thinks`: the same text twice, spaced otherwise, no call: one repeated turn.
- `clean`: one search, one answer: nothing repeated.

Over the run: 8 calls, 3 repeated (in 2 tasks); 13 turns, 3 repeated (in 2 tasks); 3 of 4 tasks loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rollout.events import AnyEvent, CompletionEvent, LLMOutputEvent, ToolCallEvent, ToolResultEvent
from rollout.records import Question, TaskResult, ToolCallRecord, wire_task_id

T0 = 1_700_000_000.0
SEARCH = "search"
GET_DOCUMENT = "get_document"
SEARCH_R1_TURN = "<think>I need to search.</think>\n<search> capital of France </search>"

Step = tuple[str | None, list[tuple[str, dict[str, Any]]]]
"""One turn: the text the model wrote and the calls it asked for, as (tool, arguments)."""


def scripted(qid: str, steps: list[Step], answer: str = "", *, repeat: int = 0) -> TaskResult:
    """A task whose agent took `steps`, each call returning passage p1; it answers `answer` in one more turn, or ends
    out of turns without one."""
    events: list[AnyEvent] = []
    calls: list[ToolCallRecord] = []
    t = T0
    for turn, (text, asked) in enumerate(steps, start=1):
        ids = [f"{qid}-{repeat}-{turn}-{k}" for k in range(len(asked))]
        events.append(LLMOutputEvent(t=t, turn=turn, content=text, tool_calls=[
            {"id": f"model-{i}", "name": tool, "arguments": args} for i, (tool, args) in zip(ids, asked, strict=True)]))
        for call_id, (tool, args) in zip(ids, asked, strict=True):
            events += [ToolCallEvent(t=t + 0.1, call_id=call_id, name=tool, arguments=dict(args)),
                       ToolResultEvent(t=t + 0.2, call_id=call_id, name=tool, ok=True, outcome="ok", text="[p1] Paris",
                                       latency_ms=5.0, result_ids=["p1"])]
            calls.append(ToolCallRecord(call_id=call_id, name=tool, arguments=dict(args), ok=True, outcome="ok",
                                        error=None, started=t + 0.1, latency_ms=5.0, result_ids=["p1"],
                                        result_doc_ids=["p1"], reached_gateway=True))
        t += 1.0
    turns = len(steps)
    if answer:
        turns += 1
        events += [LLMOutputEvent(t=t, turn=turns, content=answer), CompletionEvent(t=t, prediction=answer, turns=turns)]
    return TaskResult.answered(Question(qid, f"question {qid}", ["Paris"]), prediction=answer, turns=turns,
                               messages=[], usage={}, calls=calls, events=events, worker_id="w0", latency_s=1.0,
                               repeat=repeat, out_of_turns=not answer)


def search_r1() -> TaskResult:
    step: Step = (SEARCH_R1_TURN, [(SEARCH, {"query": "capital of France"})])
    return scripted("search_r1", [step, step, step])


def native() -> TaskResult:
    return scripted("native", [
        (None, [(SEARCH, {"query": "Who founded Acme", "top_k": 5})]),
        ("Let me look again.", [(SEARCH, {"top_k": 5.0, "query": " who  founded ACME "})]),
        (None, [(SEARCH, {"query": "who founded acme", "top_k": 10})]),
        (None, [(GET_DOCUMENT, {"query": "who founded acme", "top_k": 10})]),
    ], "Jane Acme")


def thinks() -> TaskResult:
    return scripted("thinks", [("I think it is Paris.", []), ("I think  it is Paris. ", [])], "Paris")


def clean(qid: str = "clean", *, repeat: int = 0) -> TaskResult:
    return scripted(qid, [(None, [(SEARCH, {"query": "capital of France"})])], "Paris", repeat=repeat)


def loops() -> list[TaskResult]:
    return [search_r1(), native(), thinks(), clean()]


def write_run(folder: Path, tasks: list[TaskResult], *, mode: str = "sparse") -> Path:
    """A run folder of `tasks`: trajectory.jsonl, config.yaml, and the gateway's ledger of their calls."""
    (folder / "tool_stats").mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"mode_name": mode, "gateway_config_path": "g.json"}),
                                        encoding="utf-8")
    (folder / "trajectory.jsonl").write_text("".join(json.dumps(t.to_json()) + "\n" for t in tasks), encoding="utf-8")
    ledger = [{"call_id": c.call_id, "tool_name": c.name, "task_id": wire_task_id(t.id, t.repeat), "worker_id": "w0",
               "attempt": 1, "ok": True, "outcome": "ok", "error": None, "duration_ms": 2.0, "timestamp": c.started,
               "result_ids": c.result_ids} for t in tasks for c in t.tool_calls]
    (folder / "tool_stats" / "realtime_calls.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ledger),
                                                                encoding="utf-8")
    return folder
