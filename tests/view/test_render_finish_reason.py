"""A replayed task and the live lines show where an LLM reply was cut at its token limit: the agent's own replies
(their finish_reason) and the LLM replies a step tool read (its call's accounting)."""

from rich.console import Console

from rollout.accounting import CallAccounting
from rollout.events import (
    CompletionEvent,
    LLMOutputEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.view.render import format_live_event, render_task

T0 = 1_700_000_000.0
CUT = "(cut at max_tokens)"


def _replay(task: TaskResult) -> str:
    console = Console(record=True, width=200)
    render_task(console, task)
    return console.export_text()


def _task(answer_finish: str | None, llm_truncated: int = 0) -> TaskResult:
    call = ToolCallRecord(call_id="c1", name="generate_answer", arguments={}, ok=True, outcome="ok", error=None,
                          started=T0, latency_ms=250.0, result_ids=[], result_doc_ids=[], reached_gateway=True,
                          accounting=CallAccounting("generation", 20, 300, 64, 200.0, llm_truncated=llm_truncated))
    events = [
        LLMOutputEvent(t=T0, turn=1, tool_calls=[{"id": "c1", "name": "generate_answer", "arguments": {}}],
                       finish_reason="tool_calls"),
        ToolCallEvent(t=T0 + 0.1, call_id="c1", name="generate_answer", arguments={}),
        ToolResultEvent(t=T0 + 0.3, call_id="c1", name="generate_answer", ok=True, outcome="ok", text="Arlen",
                        latency_ms=250.0),
        LLMOutputEvent(t=T0 + 0.5, turn=2, content="Arlen Voss was born in", finish_reason=answer_finish),
        CompletionEvent(t=T0 + 0.6, prediction="Arlen Voss was born in", turns=2),
    ]
    return TaskResult.answered(Question("q1", "Where was Arlen Voss born?", ["Kelmor"]),
                               prediction="Arlen Voss was born in", turns=2, messages=[], usage={}, calls=[call],
                               events=events, worker_id="w", latency_s=1.0)


def test_a_cut_answer_is_marked_in_the_replay_and_the_live_line():
    task = _task("length")
    text = _replay(task)
    assert "answer cut at max_tokens" in text  # the header
    [turn2] = [line for line in text.splitlines() if "turn 2" in line]
    assert CUT in turn2
    assert CUT in format_live_event("q1", task.events[3]).plain
    assert CUT not in format_live_event("q1", task.events[0]).plain


def test_a_step_tool_s_cut_llm_reply_is_marked_on_its_result():
    text = _replay(_task("stop", llm_truncated=1))
    [result] = [line for line in text.splitlines() if "result" in line and "generate_answer" in line]
    assert "1 LLM reply cut at max_tokens" in result
    assert "answer cut" not in text and CUT not in text


def test_other_finish_reasons_are_shown_as_sent():
    event = LLMOutputEvent(t=T0, turn=1, content="", finish_reason="content_filter")
    assert "(finish_reason content_filter)" in format_live_event("q1", event).plain
