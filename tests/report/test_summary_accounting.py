"""The summary's `accounting`: means per task and per tool on a hand-built run, old records rebuilt, old files read.

The run (three records, every number chosen so the means can be worked out by hand):
- A, ok: two LLM steps (1.0 s + 0.5 s), a dense search (100 ms, 300 context tokens) and a filter (400 ms,
  50 context tokens, its own LLM 200 + 20 tokens); the agent used 2,000 tokens; 3.0 s in all.
- B, timeout: one LLM step (2.0 s), a dense search (300 ms, 500 tokens) and one refused before the gateway
  (2 ms, no accounting); 800 + 200 agent tokens; 2.0 s, less than its parts: waiting is 0, not negative.
- C, ok, a line written before accounting: one dense search (50 ms), no events, no usage; 1.0 s.
"""

from __future__ import annotations

import json
import random

from rich.console import Console

from rollout.accounting import CallAccounting
from rollout.events import LLMOutputEvent
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.printed import print_summary
from rollout.report.scoring import summarize
from rollout.run_folder import read_summary, summary_path, write_summary
from rollout.summary import RunSummary

DENSE = "query_knowledge_base_dense"
FILTER = "filter_passages"


def call(name: str, latency_ms: float, cost: CallAccounting | None, *, reached: bool = True) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=f"{name}-{latency_ms}", name=name, arguments={"query": "q"}, ok=reached,
        outcome="ok" if reached else "unknown_tool", error=None if reached else "not offered", started=0.0,
        latency_ms=latency_ms, result_ids=[], result_doc_ids=[], reached_gateway=reached, accounting=cost,
    )


def steps(*latencies_ms: float) -> list[LLMOutputEvent]:
    return [LLMOutputEvent(t=0.0, turn=i + 1, latency_ms=ms) for i, ms in enumerate(latencies_ms)]


def records() -> list[TaskResult]:
    a = TaskResult.answered(
        Question("A", "?", ["x"]), prediction="x", turns=3, messages=[], usage={"total_tokens": 2000},
        calls=[call(DENSE, 100.0, CallAccounting("retrieval", 300)),
               call(FILTER, 400.0, CallAccounting("filtering", 50, 200, 20, 350.0))],
        events=steps(1000.0, 500.0), worker_id="w0", latency_s=3.0,
    )
    b = TaskResult.failed(
        Question("B", "?", ["x"]), status="timeout", error="over 2 s", worker_id="w0", latency_s=2.0,
        calls=[call(DENSE, 300.0, CallAccounting("retrieval", 500)), call(DENSE, 2.0, None, reached=False)],
        events=steps(2000.0), usage={"prompt_tokens": 800, "completion_tokens": 200},
    )
    old = TaskResult.answered(Question("C", "?", ["x"]), prediction="x", turns=2, messages=[], usage={},
                              calls=[call(DENSE, 50.0, None)], events=[], worker_id="w0", latency_s=1.0).to_json()
    del old["accounting"]
    c = TaskResult.from_json(old)
    assert c.accounting is None
    return [a, b, c]


def summary_of(tasks) -> RunSummary:
    return summarize(tasks, mode="dense", gateway_file="g.json", wall_time_s=6.0)


def test_means_per_task_are_over_every_record_scored_or_not():
    s = summary_of(records())
    assert s.scored == 2  # the timeout is left out of the metrics, not out of the accounting
    a = s.to_json()["accounting"]
    assert (a["tasks"], a["rebuilt"], a["calls"], a["calls_counted"]) == (3, 1, 5, 3)
    # total (3 + 2 + 1) / 3; LLM (1.5 + 2 + 0) / 3; tools (0.5 + 0.302 + 0.05) / 3; waiting (1 + 0 + 0.95) / 3.
    assert a["time_s"] == {"total": 2.0, "llm": 1.1667, "tools": 0.284, "waiting": 0.65}
    assert a["tool_time_s"] == {DENSE: 0.1507, FILTER: 0.1333}  # dense (0.1 + 0.302 + 0.05) / 3
    assert a["context_tokens"] == 283.3  # (300 + 50 + 500 + 0) / 3; the refused call adds nothing
    assert a["tool_llm_tokens"] == 73.3  # 220 / 3
    assert a["tokens"] == {"retrieval": 266.7, "filtering": 90.0, "chunking": 0.0, "generation": 0.0, "other": 0.0,
                           "agent": 1000.0}  # filtering 50 + 220; agent (2000 + 800 + 200) / 3


def test_per_tool_costs_are_means_per_counted_call():
    tools = summary_of(records()).to_json()["accounting"]["tools"]
    assert list(tools) == [FILTER, DENSE]  # sorted by name
    assert tools[DENSE] == {"stage": "retrieval", "calls": 4, "calls_counted": 2, "context_tokens_per_call": 400.0,
                            "llm_tokens_per_call": 0.0, "latency_ms_per_call": 113.0}  # (100 + 300 + 2 + 50) / 4
    assert tools[FILTER] == {"stage": "filtering", "calls": 1, "calls_counted": 1, "context_tokens_per_call": 50.0,
                             "llm_tokens_per_call": 220.0, "latency_ms_per_call": 400.0}


def test_the_section_does_not_depend_on_the_order_records_finished_in():
    tasks = records() * 7
    first = summary_of(tasks).to_json()["accounting"]
    for seed in range(3):
        random.Random(seed).shuffle(tasks)
        assert summary_of(tasks).to_json()["accounting"] == first


def test_a_run_whose_records_predate_accounting_has_no_section():
    old = records()[2]
    s = summary_of([old, old])
    assert s.accounting is None and "accounting" not in s.to_json()
    assert summary_of([]).accounting is None


def test_the_section_round_trips_through_the_file(tmp_path):
    s = summary_of(records())
    write_summary(tmp_path, s)
    assert json.loads(summary_path(tmp_path).read_text())["accounting"]["tools"][FILTER]["stage"] == "filtering"
    assert read_summary(tmp_path) == s


def test_a_summary_file_without_the_section_still_reads(tmp_path):
    data = summary_of(records()).to_json()
    del data["accounting"]
    summary_path(tmp_path).write_text(json.dumps(data), encoding="utf-8")
    back = read_summary(tmp_path)
    assert back is not None and back.accounting is None and back.n == 3


def test_the_printed_summary_shows_costs_per_tool_and_per_task():
    console = Console(record=True, width=200)
    print_summary(summary_of(records()), "out", console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "context tokens/call" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "tool", "calls", "failed", "stage", "context tokens/call", "tool LLM tokens/call", "ms/call"]
    dense = next(line for line in text.splitlines() if line.startswith(f"│ {DENSE}"))
    assert [c.strip() for c in dense.strip("│").split("│")] == [DENSE, "4", "1", "retrieval", "400.0", "0.0", "113.0"]
    assert ("Per task: 2.000 s (LLM 1.167, tools 0.284, waiting 0.650) · 283 context tokens (retrieval 267, "
            "filtering 90) · 73 tool LLM tokens · 1,000 agent tokens · 3 of 5 calls reported accounting") in text


def test_a_stage_outside_the_known_ones_gets_its_own_key():
    stage = "rerank"
    t = TaskResult.answered(Question("D", "?", ["x"]), prediction="x", turns=2, messages=[], usage={},
                            calls=[call("rerank", 10.0, CallAccounting(stage, 40))], events=[], worker_id="w0",
                            latency_s=0.5)
    tokens = summary_of([t]).to_json()["accounting"]["tokens"]
    assert list(tokens) == ["retrieval", "filtering", "chunking", "generation", "other", stage, "agent"]
    assert tokens[stage] == 40.0
