"""Typed records at the file edge: a TaskResult and a RunSummary become JSON, and come back, unchanged."""

from __future__ import annotations

import json

import pytest

from rollout.accounting import CallAccounting
from rollout.events import CompletionEvent, ErrorEvent, LLMOutputEvent, LLMThinkingEvent, ToolCallEvent, ToolResultEvent
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.scoring import summarize
from rollout.run.worker import EnvSpec
from rollout.run_folder import append_task, iter_trajectory, read_summary, summary_path, write_summary

T0 = 1_700_000_000.0
QUESTION = Question("q1", "Where was Arlen Voss born?", ["Kelmor"], {"gold_doc_ids": ["d1"]})
SPARSE = "query_knowledge_base_sparse"

TRAJECTORY_KEYS = [
    "id", "question", "golden_answers", "prediction", "tool_calls", "turns", "error", "worker_id", "latency_s",
    "metadata", "messages", "status", "usage", "events", "attempts", "repeat", "seed", "accounting", "truncated",
    "out_of_turns", "offered_tools", "out_of_context", "stop_message", "no_answer_tag", "unreadable_call",
]
"""The keys of a trajectory line, in the order the driver has always written them (`accounting`, then `truncated`,
`out_of_turns`, `offered_tools`, `out_of_context`, `stop_message`, `no_answer_tag` and `unreadable_call` last,
added later)."""
TOOL_CALL_KEYS = [
    "call_id", "name", "arguments", "ok", "outcome", "error", "started", "latency_ms", "result_ids", "result_doc_ids",
    "reached_gateway", "accounting",
]
EVENT_KEYS = {
    "llm_output": ["type", "t", "turn", "content", "tool_calls", "usage", "latency_ms", "finish_reason", "sent",
                   "request_ms", "server_ms"],
    "llm_thinking": ["type", "t", "turn", "content"],
    "tool_call": ["type", "t", "call_id", "name", "arguments"],
    "tool_result": ["type", "t", "call_id", "name", "ok", "outcome", "text", "latency_ms", "result_ids"],
    "completion": ["type", "t", "prediction", "turns"],
    "error": ["type", "t", "kind", "message"],
}


def assert_trajectory_shape(line: dict) -> None:
    """`line` (a trajectory line as parsed JSON) has the keys, nesting and order of today's lines."""
    assert list(line) == TRAJECTORY_KEYS
    for call in line["tool_calls"]:
        assert list(call) == TOOL_CALL_KEYS
    for event in line["events"]:
        assert list(event) == EVENT_KEYS[event["type"]]


def sparse_call() -> ToolCallRecord:
    return ToolCallRecord(
        call_id="c1", name=SPARSE, arguments={"query": "Arlen Voss born"}, ok=True, outcome="ok", error=None,
        started=T0 + 0.5, latency_ms=4.25, result_ids=["p1"], result_doc_ids=["d1"], reached_gateway=True,
        accounting=CallAccounting("retrieval", context_tokens=12),
    )


def answered() -> TaskResult:
    requested = [{"id": "c1", "name": SPARSE, "arguments": {"query": "Arlen Voss born"}}]
    events = [
        LLMOutputEvent(t=T0, turn=1, tool_calls=requested, usage={"total_tokens": 9}, latency_ms=2.0),
        ToolCallEvent(t=T0 + 0.5, call_id="c1", name=SPARSE, arguments={"query": "Arlen Voss born"}),
        ToolResultEvent(t=T0 + 0.75, call_id="c1", name=SPARSE, ok=True, outcome="ok",
                        text="Arlen Voss was born in Kelmor.", latency_ms=4.25, result_ids=["p1"]),
        CompletionEvent(t=T0 + 1.0, prediction="Kelmor", turns=2),
    ]
    return TaskResult.answered(
        QUESTION, prediction="Kelmor", turns=2, messages=[{"role": "user", "content": QUESTION.question}],
        usage={"total_tokens": 9}, calls=[sparse_call()], events=events, worker_id="worker-0", latency_s=1.5,
        repeat=1, seed=11,
    )


# This record's line as the driver wrote it before records were typed end to end, byte for byte, with the
# accounting (of the call and of the task), the replies' finish_reason and timings (`sent`, `request_ms`, `server_ms`),
# the task's `truncated`, `out_of_turns` `offered_tools`, `out_of_context`, `stop_message`, `no_answer_tag` and
# `unreadable_call` added since.
ANSWERED_LINE = (
    '{"id": "q1", "question": "Where was Arlen Voss born?", "golden_answers": ["Kelmor"], "prediction": "Kelmor", '
    '"tool_calls": [{"call_id": "c1", "name": "query_knowledge_base_sparse", "arguments": {"query": "Arlen Voss born"}, '
    '"ok": true, "outcome": "ok", "error": null, "started": 1700000000.5, "latency_ms": 4.25, "result_ids": ["p1"], '
    '"result_doc_ids": ["d1"], "reached_gateway": true, "accounting": {"stage": "retrieval", "context_tokens": 12, '
    '"llm_prompt_tokens": 0, "llm_completion_tokens": 0, "llm_ms": 0.0, "llm_truncated": 0}}], "turns": 2, "error": null, "worker_id": "worker-0", '
    '"latency_s": 1.5, "metadata": {"gold_doc_ids": ["d1"]}, "messages": [{"role": "user", "content": "Where was '
    'Arlen Voss born?"}], "status": "ok", "usage": {"total_tokens": 9}, "events": [{"type": "llm_output", '
    '"t": 1700000000.0, "turn": 1, "content": null, "tool_calls": [{"id": "c1", "name": "query_knowledge_base_sparse", '
    '"arguments": {"query": "Arlen Voss born"}}], "usage": {"total_tokens": 9}, "latency_ms": 2.0, '
    '"finish_reason": null, "sent": null, "request_ms": null, "server_ms": null}, {"type": '
    '"tool_call", "t": 1700000000.5, "call_id": "c1", "name": "query_knowledge_base_sparse", "arguments": {"query": '
    '"Arlen Voss born"}}, {"type": "tool_result", "t": 1700000000.75, "call_id": "c1", "name": '
    '"query_knowledge_base_sparse", "ok": true, "outcome": "ok", "text": "Arlen Voss was born in Kelmor.", '
    '"latency_ms": 4.25, "result_ids": ["p1"]}, {"type": "completion", "t": 1700000001.0, "prediction": "Kelmor", '
    '"turns": 2}], "attempts": 1, "repeat": 1, "seed": 11, "accounting": {"time_s": {"total": 1.5, "llm": 0.002, '
    '"tools": {"query_knowledge_base_sparse": 0.00425}, "waiting": 1.49375}, "context_tokens": {"retrieval": 12}, '
    '"tool_llm_tokens": {}, "agent_tokens": 9, "tokens": {"retrieval": 12, "filtering": 0, "chunking": 0, '
    '"generation": 0, "other": 0, "agent": 9}, "calls_counted": 1}, "truncated": false, "out_of_turns": false, "offered_tools": null, "out_of_context": false, "stop_message": null, '
    '"no_answer_tag": false, "unreadable_call": false}'
)


def test_a_task_round_trips_through_json_with_typed_calls_and_events(tmp_path):
    task = answered()
    with (tmp_path / "trajectory.jsonl").open("w", encoding="utf-8") as f:
        append_task(f, task)
    [line] = (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    assert line == ANSWERED_LINE
    assert_trajectory_shape(json.loads(line))
    [back] = iter_trajectory(tmp_path, full=True)
    assert back == task
    assert all(isinstance(c, ToolCallRecord) for c in back.tool_calls)
    assert [type(e) for e in back.events] == [LLMOutputEvent, ToolCallEvent, ToolResultEvent, CompletionEvent]


def test_every_event_type_round_trips():
    events = [
        LLMThinkingEvent(t=T0, turn=1, content="the first passage names the city"),
        ErrorEvent(t=T0 + 1, kind="timeout", message="task exceeded its time limit of 3 s (task_timeout_s)"),
    ]
    task = TaskResult.failed(QUESTION, status="timeout", error=events[-1].message, events=events, turns=1)
    line = json.loads(json.dumps(task.to_json()))
    assert_trajectory_shape(line)
    assert TaskResult.from_json(line) == task


def test_lines_of_older_runs_still_read():
    # Before statuses, usage, events, attempts, repeats and seeds, before result_doc_ids, before accounting, and
    # before answer tags.
    old = json.loads(ANSWERED_LINE)
    for key in ("status", "usage", "events", "attempts", "repeat", "seed", "accounting", "no_answer_tag"):
        del old[key]
    del old["tool_calls"][0]["result_doc_ids"]
    del old["tool_calls"][0]["accounting"]
    task = TaskResult.from_json(old)
    assert (task.status, task.usage, task.events, task.attempts, task.repeat, task.seed, task.accounting,
            task.no_answer_tag) == ("ok", {}, [], 1, 0, None, None, False)
    assert task.tool_calls == [ToolCallRecord(**{**sparse_call().to_json(), "result_doc_ids": [], "accounting": None})]


def test_malformed_calls_and_events_are_refused_with_what_is_wrong():
    line = json.loads(ANSWERED_LINE)
    no_name = {**line, "tool_calls": [{k: v for k, v in line["tool_calls"][0].items() if k != "name"}]}
    with pytest.raises(TypeError, match="tool call record without name"):
        TaskResult.from_json(no_name)
    with pytest.raises(ValueError, match="unknown event type 'mystery'; known: completion, error, llm_output"):
        TaskResult.from_json({**line, "events": [{"type": "mystery", "t": T0}]})
    with pytest.raises(TypeError, match="an event is a JSON object, not str"):
        TaskResult.from_json({**line, "events": ["completion"]})


def test_a_failed_task_is_built_by_name_and_keeps_what_it_got_to():
    with pytest.raises(TypeError):
        TaskResult.failed(QUESTION, "error", "boom")  # type: ignore[misc]  # keyword-only
    with pytest.raises(ValueError, match="use TaskResult.answered"):
        TaskResult.failed(QUESTION, status="ok", error="")
    task = TaskResult.failed(QUESTION, status="infra_error", error="1 of 1 tool calls failed", worker_id="worker-1",
                             latency_s=2.0, attempts=2, repeat=1, seed=11, calls=[sparse_call()], prediction="Kelmor")
    assert (task.id, task.question, task.golden_answers, task.metadata) == (
        "q1", QUESTION.question, ["Kelmor"], {"gold_doc_ids": ["d1"]})
    assert (task.status, task.error, task.prediction, task.tool_calls) == (
        "infra_error", "1 of 1 tool calls failed", "Kelmor", [sparse_call()])
    assert (task.worker_id, task.latency_s, task.attempts, task.key, task.seed) == ("worker-1", 2.0, 2, ("q1", 1), 11)
    # The record owns its lists: the question's are not shared.
    task.golden_answers.append("x")
    task.metadata["hops"] = 2
    assert QUESTION.golden_answers == ["Kelmor"] and "hops" not in QUESTION.metadata


def test_a_summary_round_trips_through_its_file(tmp_path):
    failed = TaskResult.failed(QUESTION, status="error", error="boom", repeat=1)
    summary = summarize([answered(), failed, TaskResult.from_json({**json.loads(ANSWERED_LINE), "repeat": 0})],
                        mode="sparse", gateway_file="g.json", wall_time_s=2.0)
    # The optional parts are exercised.
    assert summary.repeat_stats is not None and summary.tokens is not None and summary.accounting is not None
    write_summary(tmp_path, summary)
    on_disk = json.loads(summary_path(tmp_path).read_text(encoding="utf-8"))
    assert on_disk == summary.to_json()
    assert (on_disk["errors"], on_disk["timeouts"], on_disk["ci95"]["exact_match"]) == (1, 0, [1.0, 1.0])
    assert read_summary(tmp_path) == summary


def test_a_summary_file_of_an_older_version_still_reads(tmp_path):
    # Written before task statuses: every record was scored; errors and timeouts were all it counted.
    old = {
        "n": 4, "metrics": {"exact_match": 0.5, "f1": 0.5, "contains_answer": 0.5, "retrieval_recall": None},
        "mode": "dense", "gateway_file": "g.json", "complete": True, "errors": 1, "timeouts": 0,
        "tool_calls": {SPARSE: {"calls": 4, "failed": 1}}, "tool_calls_per_task": 1.0, "wall_time_s": 3.5,
        "by_hops": {"1": {"n": 4, "exact_match": 0.5, "f1": 0.5, "contains_answer": 0.5, "retrieval_recall": None}},
    }
    summary_path(tmp_path).write_text(json.dumps(old), encoding="utf-8")
    summary = read_summary(tmp_path)
    assert summary is not None
    assert (summary.n, summary.scored, summary.repeats, summary.errors, summary.score_failed) == (4, 4, 1, 1, False)
    assert summary.statuses == {"ok": 3, "error": 1, "timeout": 0}
    assert summary.by_hops is not None and summary.by_hops["1"].metrics["exact_match"] == 0.5
    assert summary.tool_calls[SPARSE].failed == 1 and summary.repeat_stats is None and summary.tokens is None
    assert summary.accounting is None


def test_no_summary_or_not_a_summary_reads_as_none(tmp_path, caplog):
    assert read_summary(tmp_path) is None
    summary_path(tmp_path).write_text('{"tools": []}', encoding="utf-8")
    assert read_summary(tmp_path) is None
    assert "not an evaluation summary" in caplog.text


def test_the_gateway_token_stays_out_of_an_env_spec_s_repr():
    spec = EnvSpec(url="http://127.0.0.1:1/mcp", gateway_config_path="g.json", auth_token="s3cret-token")
    assert "s3cret-token" not in repr(spec) and spec.auth_token == "s3cret-token"
