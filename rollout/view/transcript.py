"""A task's page in the web viewer: its events as a timeline, each tool call a card, the documents it retrieved.

`task_view` reads one trajectory line at its offset (`TrajectoryIndex.read_task`) and makes the records the
task template renders: no HTTP, no HTML here.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollout.events import (
    CompletionEvent,
    ErrorEvent,
    LLMOutputEvent,
    LLMThinkingEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.records import TaskResult, ToolCallRecord
from rollout.relevance_view import is_relevance_view
from rollout.repetition import task_repeats
from rollout.report.extra_scores import ExtraScores
from rollout.view.index import TrajectoryIndex
from rollout.view.render import finish_note

RESULT_PREVIEW_CHARS = 600
"""A tool result longer than this shows its start, with "show all" for the rest."""


@dataclass(frozen=True, slots=True)
class ToolCard:
    """One tool call as a collapsible card: what was asked, what came back, what it cost."""

    anchor: str
    name: str
    arguments: str
    """The arguments as indented JSON."""
    ok: bool | None
    """None while the call has no result (the task ended first)."""
    outcome: str
    latency_ms: float | None
    result: str
    preview: str
    """The start of `result` when it is long (else equal to it)."""
    relevance: bool
    """The result is a relevance view (a compact chart the agent read): shown whole, monospaced."""
    result_ids: list[str]
    gold_ids: set[str]
    """The returned ids that are gold (`_gold_marks`: it or its document is named gold), as the documents table
    marks them."""
    accounting: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One event of the task as the page shows it; `card` for a tool call."""

    anchor: str
    kind: str
    """llm, think, call, answer or error (a tool result is shown inside its call's card)."""
    offset_s: float
    title: str
    text: str = ""
    calls: list[str] = field(default_factory=list)
    """For llm: the tool calls it asked for, `name(arguments)`."""
    note: str = ""
    card: ToolCard | None = None
    repeated: str = ""
    """For a call that repeats an earlier one of the task, or a turn the same as the one before: which
    (`rollout.repetition`), e.g. "repeats call 1"; "" otherwise."""


@dataclass(frozen=True, slots=True)
class RetrievedDoc:
    doc_id: str
    gold: bool
    first_call: int
    """1-based number of the tool call that first returned it."""
    rank: int
    """Its 1-based rank in that call's result."""
    times: int
    """How many calls returned it."""


@dataclass(frozen=True, slots=True)
class RelevanceStrip:
    """One retrieval call in the relevance chart: a cell per returned document, gold ones marked."""

    call: int
    name: str
    query: str
    cells: list[tuple[str, bool]]


@dataclass(frozen=True, slots=True)
class TaskView:
    task: TaskResult
    em: float | None
    f1: float | None
    recall: float | None
    extra: dict[str, float | None]
    """The task's extra metrics (the run's scores files); None where it has no value or is not scored."""
    timeline: list[TimelineEntry]
    docs: list[RetrievedDoc]
    missed_gold: list[str]
    chart: list[RelevanceStrip]
    record_json: str
    """The whole trajectory line, indented: what "copy as JSON" copies."""
    repeated_calls: int = 0
    """Calls repeating an earlier call of the task (each marked in the timeline)."""
    repeated_turns: int = 0
    """Turns the same as the turn before."""


def _gold(task: TaskResult) -> set[str]:
    return {str(d) for d in task.metadata.get("gold_doc_ids", []) or []}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _call_text(name: str, arguments: Any) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    return f"{name}({args})"


def task_view(index: TrajectoryIndex, i: int, extra: ExtraScores | None = None) -> TaskView:
    """The task page of row `i`; `extra` holds the run's scores files."""
    record = index.read_record(i)  # read and parsed once: the page shows both the task and its line
    task = index.read_task(i, record)
    gold = _gold(task)
    records = {c.call_id: c for c in task.tool_calls}
    results = {e.call_id: e for e in task.events if isinstance(e, ToolResultEvent)}
    t0 = task.events[0].t if task.events else 0.0
    repeats = task_repeats(task)
    repeated_calls, repeated_turns = repeats.call_marks(task.tool_calls), repeats.turn_marks()
    timeline: list[TimelineEntry] = []
    for n, e in enumerate(task.events):
        anchor, offset = f"e{n}", e.t - t0
        match e:
            case LLMOutputEvent():
                meta = [f"turn {e.turn}"] + ([f"{e.latency_ms:.0f} ms"] if e.latency_ms else [])
                if e.usage and e.usage.get("total_tokens") is not None:
                    meta.append(f"{e.usage['total_tokens']:,} tokens")
                timeline.append(TimelineEntry(anchor, "llm", offset, " · ".join(meta), e.content or "",
                                              [_call_text(str(c.get("name")), c.get("arguments")) for c in e.tool_calls],
                                              finish_note(e.finish_reason), repeated=repeated_turns.get(e.turn, "")))
            case LLMThinkingEvent():
                timeline.append(TimelineEntry(anchor, "think", offset, f"turn {e.turn}", e.content))
            case ToolCallEvent():
                card = _card(anchor, e, results.get(e.call_id), records.get(e.call_id), gold)
                timeline.append(TimelineEntry(anchor, "call", offset, e.name, card=card,
                                              repeated=repeated_calls.get(e.call_id, "")))
            case ToolResultEvent():
                continue  # shown in its call's card
            case CompletionEvent():
                timeline.append(TimelineEntry(anchor, "answer", offset, f"after {e.turns} turns", e.prediction))
            case ErrorEvent():
                timeline.append(TimelineEntry(anchor, "error", offset, e.kind, e.message))
    if not task.events:  # records of older runs: their tool calls, in order
        by_index = {n: f"repeats call {first + 1}" for n, first in repeats.repeats_of.items()}
        timeline = [TimelineEntry(f"c{n}", "call", c.started - task.tool_calls[0].started, c.name,
                                  card=_card(f"c{n}", None, None, c, gold), repeated=by_index.get(n, ""))
                    for n, c in enumerate(task.tool_calls)]
    docs, chart = _retrieved(task.tool_calls, gold)
    seen = {d.doc_id for d in docs} | {i for c in task.tool_calls for i in c.result_doc_ids}
    cols = index.columns
    scored = cols["em"][i] is not None
    extra = {m: v if scored else None for m, v in (extra or ExtraScores()).of(task.key).items()}
    return TaskView(task=task, em=cols["em"][i], f1=cols["f1"][i], recall=cols["recall"][i], extra=extra,
                    timeline=timeline, docs=docs, missed_gold=sorted(gold - seen), chart=chart,
                    record_json=_json(record), repeated_calls=len(repeats.repeats_of),
                    repeated_turns=len(repeats.repeated_turns))


def _card(anchor: str, call: ToolCallEvent | None, result: ToolResultEvent | None, record: ToolCallRecord | None,
          gold: set[str]) -> ToolCard:
    name = call.name if call else (record.name if record else "?")
    arguments = call.arguments if call else (record.arguments if record else {})
    if result is not None:
        ok, outcome, latency, text, ids = result.ok, result.outcome, result.latency_ms, result.text, result.result_ids
    elif record is not None:
        ok, outcome, latency, text, ids = record.ok, record.outcome, record.latency_ms, record.error or "", record.result_ids
    else:
        ok, outcome, latency, text, ids = None, "no result", None, "", []
    # the record's ids when it has them: the event's are the same ones, without their documents
    marked = (_gold_marks(record.result_ids, _doc_ids(record), gold) if record is not None and record.result_ids
              else [(str(i), str(i) in gold) for i in ids])
    accounting = record.accounting.to_json() if record is not None and record.accounting is not None else None
    return ToolCard(
        anchor=anchor, name=name, arguments=_json(arguments), ok=ok, outcome=outcome, latency_ms=latency,
        result=text, preview=text if len(text) <= RESULT_PREVIEW_CHARS else text[:RESULT_PREVIEW_CHARS] + "…",
        relevance=is_relevance_view(text), result_ids=[str(i) for i in ids],
        gold_ids={pid for pid, is_gold in marked if is_gold}, accounting=accounting,
    )


def _doc_ids(call: ToolCallRecord) -> list[str]:
    """The source document of each id the call returned (the ids themselves in records without them)."""
    return call.result_doc_ids if len(call.result_doc_ids) == len(call.result_ids) else call.result_ids


def _gold_marks(result_ids: list[str], doc_ids: list[str], gold: set[str]) -> list[tuple[str, bool]]:
    """Each returned id in rank order, and whether it is gold: it or its source document is named gold. The one rule
    of a card's marks and count, the relevance chart and the documents table."""
    return [(str(pid), str(pid) in gold or str(did) in gold) for pid, did in zip(result_ids, doc_ids, strict=True)]


def _retrieved(calls: list[ToolCallRecord], gold: set[str]) -> tuple[list[RetrievedDoc], list[RelevanceStrip]]:
    """Every document the task's calls returned (first seen first), and the chart: a strip per call that returned
    any. A passage counts as gold when it or its source document is named gold."""
    first: dict[str, tuple[int, int, bool]] = {}
    times: Counter[str] = Counter()
    chart: list[RelevanceStrip] = []
    for n, c in enumerate(calls, start=1):
        cells = _gold_marks(c.result_ids, _doc_ids(c), gold)
        for rank, (pid, is_gold) in enumerate(cells, start=1):
            times[pid] += 1
            first.setdefault(pid, (n, rank, is_gold))
        if cells:
            query = c.arguments.get("query") if isinstance(c.arguments, dict) else None
            chart.append(RelevanceStrip(n, c.name, "" if query is None else str(query), cells))
    docs = [RetrievedDoc(pid, g, call, rank, times[pid]) for pid, (call, rank, g) in first.items()]
    return docs, chart


def neighbours(rows: list[int], i: int) -> tuple[int | None, int | None]:
    """The rows before and after `i` in a filtered order (None at either end, or when `i` is not in it)."""
    try:
        k = rows.index(i)
    except ValueError:
        return None, None
    return (rows[k - 1] if k > 0 else None), (rows[k + 1] if k + 1 < len(rows) else None)
