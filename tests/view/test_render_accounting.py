"""A replayed task shows the relevance charts the agent read in full, and where its time and tokens went."""

from rich.console import Console

from rollout.accounting import CallAccounting
from rollout.events import CompletionEvent, ToolCallEvent, ToolResultEvent
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.relevance_view import RelevanceRow, render_relevance
from rollout.view.render import render_task

T0 = 1_700_000_000.0


def _replay(task: TaskResult) -> str:
    console = Console(record=True, width=160)
    render_task(console, task)
    return console.export_text()


def test_a_relevance_chart_is_shown_whole_and_the_accounting_follows():
    rows = [RelevanceRow(f"doc-{i}", f"Title {i}", 10 - i, 10 - i >= 5) for i in range(8)]
    chart = render_relevance("who founded Veltrix", rows, source="filter_documents, encoder", scale=10, threshold=5)
    long_text = "\n".join(f"line {i}" for i in range(8))
    call = ToolCallRecord(call_id="c1", name="filter_documents", arguments={}, ok=True, outcome="ok", error=None,
                          started=T0, latency_ms=250.0, result_ids=[], result_doc_ids=[], reached_gateway=True,
                          accounting=CallAccounting("filtering", 90, 400, 8, 200.0))
    events = [
        ToolCallEvent(t=T0, call_id="c1", name="filter_documents", arguments={}),
        ToolResultEvent(t=T0 + 0.25, call_id="c1", name="filter_documents", ok=True, outcome="ok", text=chart,
                        latency_ms=250.0),
        ToolResultEvent(t=T0 + 0.3, call_id="c2", name="other_tool", ok=True, outcome="ok", text=long_text,
                        latency_ms=1.0),
        CompletionEvent(t=T0 + 0.5, prediction="Arlen Voss", turns=2),
    ]
    task = TaskResult.answered(Question("q1", "who founded Veltrix", ["Arlen Voss"]), prediction="Arlen Voss",
                               turns=2, messages=[], usage={}, calls=[call], events=events, worker_id="w",
                               latency_s=1.0)
    text = _replay(task)
    assert "doc-7" in text  # all eight rows of the chart, where another result shows three lines
    assert "line 7" not in text and "(+5 lines)" in text
    assert "time 1.00 s: llm 0.00 · tools 0.25 (filter_documents 0.25) · waiting 0.75" in text
    assert "tokens: filtering 498" in text  # 90 context tokens + 408 of the filter's own LLM calls
