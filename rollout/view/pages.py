"""What the web viewer's pages show, computed from run folders: the records the templates render.

Nothing here knows about HTTP or HTML: `rollout.view.web` serves these records through the templates, and
`rollout.view.static` writes the same templates into one file. Every figure is computed from the run's
own files with the functions its reports use (`score_task` per task, the tool report, `compare_runs`),
so the page and `evaluation_summary.json` / `report compare` say the same thing.
"""

from __future__ import annotations

import base64
import codecs
import json
import logging
import math
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean
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
from rollout.report.calls import run_labels
from rollout.report.compare import Comparison, common_parent, compare_runs, distinct_labels
from rollout.report.scoring import STATUSES, t_interval
from rollout.run_folder import read_json, read_summary, report_path, trajectory_path
from rollout.view.index import TrajectoryIndex

logger = logging.getLogger(__name__)

RESULT_PREVIEW_CHARS = 600
"""A tool result longer than this shows its start, with "show all" for the rest."""
RIGHT_ABOVE = 0.5
"""A question is right in a comparison when its EM over its scored repeats is above this (as `report compare`)."""
REPORT_HEAD = 1 << 20
"""Bytes of a longer tool report read for its tools table (`tool_table`); a shorter one is read whole."""
_WHITESPACE = re.compile(r"[ \t\n\r]*")
"""JSON's whitespace."""


# --- runs ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """One served run folder and its index (kept up to date with `refresh`)."""

    number: int
    """Its place in the URL (`/run/0`)."""
    label: str
    """The mode, plus the overrides that tell it from the other runs served."""
    folder: Path
    index: TrajectoryIndex

    def refresh(self) -> int:
        return self.index.refresh()


def open_runs(folders: Sequence[Path]) -> list[Run]:
    """The runs to serve, indexed (from the cache beside each when it is current)."""
    labels = distinct_labels(list(folders)) if len(folders) > 1 else [_single_label(folders[0])]
    return [Run(number=n, label=label, folder=folder, index=TrajectoryIndex.load(trajectory_path(folder)))
            for n, (folder, label) in enumerate(zip(folders, labels, strict=True))]


def _single_label(folder: Path) -> str:
    return run_labels([folder])[0] if folder.name else str(folder)


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    value: float | None
    ci: tuple[float, float] | None
    """Student-t 95% interval over questions (each question's mean over its scored repeats)."""
    n: int
    """Questions it is averaged over."""


@dataclass(frozen=True, slots=True)
class RunSummaryView:
    """The run page's summary box."""

    tasks: int
    statuses: dict[str, int]
    scored: int
    metrics: list[Metric]
    truncated: int
    out_of_turns: int
    tokens_per_task: float | None
    cost_per_task: float | None
    time_split: dict[str, float | None]
    """Mean seconds per task: total, llm, tools, waiting (None when no record carries accounting)."""
    calls_per_task: float
    complete: bool | None
    """The run's evaluation_summary.json says it finished every task (None before it is written)."""
    degraded_tools: dict[str, str]
    duplicates: int
    problems: list[str]
    skipped: int


def _mean(values: Sequence[float]) -> float | None:
    """`statistics.mean` of `values` (None when there are none): the same number, of the same type, in a fraction of
    its time. statistics sums every value as an exact Fraction, seconds over a 100,000-task run's columns. Ints are
    summed exactly by `sum`; floats by `math.fsum` (correctly rounded), repeated on what is left until nothing is,
    so the few partial sums add up to the exact total; then one division rounds the mean, as statistics' does.
    Anything else (bools, a mix, NaN, infinities) goes to statistics."""
    if not values:
        return None
    kinds = set(map(type, values))
    if kinds == {int}:  # statistics' mean of ints is an int when it is whole
        total = sum(values)
        return total // len(values) if total % len(values) == 0 else total / len(values)
    if kinds != {float}:
        return mean(values)
    if len(values) == 1:
        return values[0] + 0.0  # statistics' mean of -0.0 is 0.0
    parts: list[float] = []
    rest = values
    try:
        while part := math.fsum(rest):
            if not math.isfinite(part):
                return mean(values)
            parts.append(part)
            rest = [*values, *(-p for p in parts)]
    except OverflowError:
        return mean(values)
    if len(parts) <= 1:  # the total is a float: one IEEE division rounds the mean correctly
        return (parts[0] if parts else 0.0) / len(values)
    # Each part is an int over a power of two: over the largest of those, the total is an exact int, and Python's
    # division of ints rounds correctly.
    ratios = [p.as_integer_ratio() for p in parts]
    common = max(q for _, q in ratios)
    return sum(p * (common // q) for p, q in ratios) / (common * len(values))


def _metric(name: str, keys: list[str], values: list[float | None], *, one_per_question: bool) -> Metric:
    scored = [v for v in values if v is not None]
    if one_per_question:  # each question's mean is its one value (as statistics gives it: -0.0 is 0.0), in file order
        means = [v + 0.0 for v in scored]
    else:
        per_question: dict[str, list[float]] = {}
        for key, value in zip(keys, values, strict=True):
            if value is not None:
                per_question.setdefault(key, []).append(value)
        means = [_mean(v) for v in per_question.values()]
    return Metric(name, _mean(scored), t_interval(means) if len(means) > 1 else None, len(means))


def run_summary(run: Run) -> RunSummaryView:
    """The summary box: its figures over every task computed once per state of the index, the run's
    evaluation_summary.json (written when it ends) read each time."""
    summary = read_summary(run.folder)
    return replace(run.index.memo("summary", lambda: _task_summary(run)),
                   complete=None if summary is None else summary.complete,
                   degraded_tools={} if summary is None else dict(summary.degraded_tools))


def _task_summary(run: Run) -> RunSummaryView:
    cols, n = run.index.columns, len(run.index)
    statuses = Counter(cols["status"])
    ids = cols["id"]
    one_each = len(set(ids)) == n  # no repeats
    with_acc = [i for i in range(n) if cols["llm_s"][i] is not None]
    time_split = {
        "total": _mean(cols["latency_s"]),
        "llm": _mean([cols["llm_s"][i] for i in with_acc]) if with_acc else None,
        "tools": _mean([cols["tool_s"][i] for i in with_acc]) if with_acc else None,
        "waiting": _mean([cols["waiting_s"][i] for i in with_acc]) if with_acc else None,
    }
    return RunSummaryView(
        tasks=n, statuses={s: statuses.get(s, 0) for s in STATUSES},
        scored=sum(v is not None for v in cols["em"]),
        metrics=[_metric("EM", ids, cols["em"], one_per_question=one_each),
                 _metric("F1", ids, cols["f1"], one_per_question=one_each),
                 _metric("retrieval recall", ids, cols["recall"], one_per_question=one_each)],
        truncated=sum(cols["truncated"]), out_of_turns=sum(cols["out_of_turns"]),
        tokens_per_task=_mean([t for t in cols["tokens"] if t is not None]),
        cost_per_task=_mean([c for c in cols["cost"] if c is not None]),
        time_split=time_split, calls_per_task=(sum(cols["calls"]) / n) if n else 0.0,
        complete=None, degraded_tools={},  # from the evaluation summary, by `run_summary`
        duplicates=run.index.duplicates, problems=list(run.index.problems), skipped=run.index.skipped,
    )


def tool_table(run: Run) -> list[dict[str, Any]] | None:
    """The tool report's per-tool rows (tool_stats/report.json), or None before the run wrote it."""
    path = report_path(run.folder)
    tools = _tools_from_head(path)
    if tools is None:
        report = read_json(path)
        if not report:
            return None
        tools = report.get("tools", [])
    return [dict(t) for t in tools]


def _tools_from_head(path: Path) -> list[Any] | None:
    """The "tools" member of a report longer than `REPORT_HEAD`, parsed from its first `REPORT_HEAD` bytes; None for a
    shorter report (read whole), or when the member is not a list found there.

    A report holds a row per task after its tools table (~70 MB at 100,000 tasks, a second to parse): the summary
    and the tools table come first (`rollout.report.tool_stats`), so the object's members are parsed in order up to
    "tools" and the rest is left unread (a long report whose end is damaged still shows its tools table)."""
    try:
        if path.stat().st_size <= REPORT_HEAD:
            return None
        with path.open("rb") as f:
            head = f.read(REPORT_HEAD)
        # An incremental decoder keeps a character cut at the end for bytes that never come: it is dropped.
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(head)
        decoder = json.JSONDecoder()
        i = _WHITESPACE.match(text, 0).end()
        if text[i] != "{":
            return None
        i = _WHITESPACE.match(text, i + 1).end()
        while text[i] == '"':
            name, i = decoder.raw_decode(text, i)
            i = _WHITESPACE.match(text, i).end()
            if text[i] != ":":
                return None
            value, i = decoder.raw_decode(text, _WHITESPACE.match(text, i + 1).end())
            if name == "tools":
                return value if isinstance(value, list) else None
            i = _WHITESPACE.match(text, i).end()
            if text[i] != ",":
                return None
            i = _WHITESPACE.match(text, i + 1).end()
    except (OSError, ValueError, IndexError):  # unreadable, not JSON, or cut short before "tools" ends
        return None
    return None


def tool_names(run: Run) -> list[str]:
    """Every tool some task of the run called, for the tool filter."""
    return run.index.memo("tool_names", lambda: sorted({t for tools in run.index.columns["tools"] for t in tools.split(",") if t}))


# --- one task -----------------------------------------------------------------------------------


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
    timeline: list[TimelineEntry]
    docs: list[RetrievedDoc]
    missed_gold: list[str]
    chart: list[RelevanceStrip]
    record_json: str
    """The whole trajectory line, indented: what "copy as JSON" copies."""


def _gold(task: TaskResult) -> set[str]:
    return {str(d) for d in task.metadata.get("gold_doc_ids", []) or []}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _call_text(name: str, arguments: Any) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    return f"{name}({args})"


def _finish(reason: str | None) -> str:
    if reason in (None, "stop", "tool_calls"):
        return ""
    return "cut at max_tokens" if reason == "length" else f"finish_reason {reason}"


def task_view(index: TrajectoryIndex, i: int) -> TaskView:
    record = index.read_record(i)
    task = index.read_task(i)
    gold = _gold(task)
    records = {c.call_id: c for c in task.tool_calls}
    results = {e.call_id: e for e in task.events if isinstance(e, ToolResultEvent)}
    t0 = task.events[0].t if task.events else 0.0
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
                                              _finish(e.finish_reason)))
            case LLMThinkingEvent():
                timeline.append(TimelineEntry(anchor, "think", offset, f"turn {e.turn}", e.content))
            case ToolCallEvent():
                card = _card(anchor, e, results.get(e.call_id), records.get(e.call_id), gold)
                timeline.append(TimelineEntry(anchor, "call", offset, e.name, card=card))
            case ToolResultEvent():
                continue  # shown in its call's card
            case CompletionEvent():
                timeline.append(TimelineEntry(anchor, "answer", offset, f"after {e.turns} turns", e.prediction))
            case ErrorEvent():
                timeline.append(TimelineEntry(anchor, "error", offset, e.kind, e.message))
    if not task.events:  # records of older runs: their tool calls, in order
        timeline = [TimelineEntry(f"c{n}", "call", c.started - task.tool_calls[0].started, c.name,
                                  card=_card(f"c{n}", None, None, c, gold))
                    for n, c in enumerate(task.tool_calls)]
    docs, chart = _retrieved(task.tool_calls, gold)
    seen = {d.doc_id for d in docs} | {i for c in task.tool_calls for i in c.result_doc_ids}
    cols = index.columns
    return TaskView(task=task, em=cols["em"][i], f1=cols["f1"][i], recall=cols["recall"][i], timeline=timeline,
                    docs=docs, missed_gold=sorted(gold - seen), chart=chart, record_json=_json(record))


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
    doc_ids = list(record.result_doc_ids) if record is not None else []
    accounting = record.accounting.to_json() if record is not None and record.accounting is not None else None
    return ToolCard(
        anchor=anchor, name=name, arguments=_json(arguments), ok=ok, outcome=outcome, latency_ms=latency,
        result=text, preview=text if len(text) <= RESULT_PREVIEW_CHARS else text[:RESULT_PREVIEW_CHARS] + "…",
        relevance=is_relevance_view(text), result_ids=[str(i) for i in ids],
        gold_ids={str(i) for i in ids} & gold | {str(d) for d in doc_ids} & gold, accounting=accounting,
    )


def _retrieved(calls: list[ToolCallRecord], gold: set[str]) -> tuple[list[RetrievedDoc], list[RelevanceStrip]]:
    """Every document the task's calls returned (first seen first), and the chart: a strip per call that returned
    any. A passage counts as gold when it or its source document is named gold."""
    first: dict[str, tuple[int, int, bool]] = {}
    times: Counter[str] = Counter()
    chart: list[RelevanceStrip] = []
    for n, c in enumerate(calls, start=1):
        doc_ids = c.result_doc_ids if len(c.result_doc_ids) == len(c.result_ids) else c.result_ids
        cells = []
        for rank, (pid, did) in enumerate(zip(c.result_ids, doc_ids, strict=True), start=1):
            is_gold = str(pid) in gold or str(did) in gold
            cells.append((str(pid), is_gold))
            times[str(pid)] += 1
            first.setdefault(str(pid), (n, rank, is_gold))
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


# --- two runs -----------------------------------------------------------------------------------

CELLS = {"both_right": "both right", "only_a": "only A right", "only_b": "only B right", "both_wrong": "both wrong"}


@dataclass(frozen=True, slots=True)
class Grid:
    """Questions both runs scored, by which run got them right (EM over scored repeats above 0.5)."""

    cells: dict[str, list[str]]
    """Cell name (`CELLS`) → question ids, in run A's order."""
    only_in_a: int
    only_in_b: int


def _question_em(index: TrajectoryIndex) -> dict[str, float]:
    per: dict[str, list[float]] = {}
    for qid, em in zip(index.columns["id"], index.columns["em"], strict=True):
        if em is not None:
            per.setdefault(qid, []).append(em)
    return {q: _mean(v) for q, v in per.items()}


def grid(a: TrajectoryIndex, b: TrajectoryIndex) -> Grid:
    em_a, em_b = _question_em(a), _question_em(b)
    cells: dict[str, list[str]] = {name: [] for name in CELLS}
    for q, va in em_a.items():
        if q not in em_b:
            continue
        right_a, right_b = va > RIGHT_ABOVE, em_b[q] > RIGHT_ABOVE
        name = ("both_right" if right_b else "only_a") if right_a else ("only_b" if right_b else "both_wrong")
        cells[name].append(q)
    return Grid(cells=cells, only_in_a=len(em_a.keys() - em_b.keys()), only_in_b=len(em_b.keys() - em_a.keys()))


def comparison(runs: Sequence[Run]) -> Comparison:
    """`report compare` of the runs, the first as baseline."""
    return compare_runs([r.folder for r in runs])


def comparison_plots(c: Comparison) -> list[str]:
    """The comparison's plots (metrics, and costs when the runs carry accounting) as PNG data URIs."""
    import matplotlib

    matplotlib.use("Agg")
    from rollout.report.compare_costs import plot_costs
    from rollout.report.compare_plot import plot_comparison

    uris = []
    with tempfile.TemporaryDirectory(prefix="rollout-view-") as tmp:
        for draw in (plot_comparison, plot_costs) if c.with_accounting else (plot_comparison,):
            png = draw(c, Path(tmp) / f"{draw.__name__}.png").read_bytes()
            uris.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    return uris


def common_folder(runs: Sequence[Run]) -> Path:
    return common_parent([r.folder for r in runs])


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table cell ("-" when unknown)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"
