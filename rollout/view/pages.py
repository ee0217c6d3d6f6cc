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

from rollout.benchmark_scores import Calibration
from rollout.errors import ReportError
from rollout.repetition import Repetition
from rollout.report.compare.comparison import Comparison, compare_runs
from rollout.report.compare.question_set import RunQuestionSet, question_set_line, run_question_set, shared_question_set
from rollout.report.compare.run_folders import distinct_labels
from rollout.report.extra_scores import ExtraScores, read_scores, scores_dir
from rollout.report.scoring import STATUSES, metric_interval
from rollout.run_folder import read_json, read_summary, report_path, trajectory_path
from rollout.view.index import TrajectoryIndex

logger = logging.getLogger(__name__)

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
    _scores: tuple[tuple[Any, ...], ExtraScores] | None = field(default=None, repr=False)
    """The run's scores files as last read, with the state of `scores/` they were read at (`scores`)."""

    def refresh(self) -> int:
        return self.index.refresh()


def open_runs(folders: Sequence[Path]) -> list[Run]:
    """The runs to serve, indexed (from the cache beside each when it is current)."""
    labels = distinct_labels(list(folders))
    return [Run(number=n, label=label, folder=folder, index=TrajectoryIndex.load(trajectory_path(folder)))
            for n, (folder, label) in enumerate(zip(folders, labels, strict=True))]


@dataclass(frozen=True, slots=True)
class QuestionSets:
    """What the front page says of the runs' question sets, as `report compare` says it."""

    line: str | None
    """`question set: NAME (N questions, hash abc12345)` when every run asked one set."""
    per_run: list[RunQuestionSet | None]
    """Each run's set when they differ, shown beside each run (empty when they do not, or no run says)."""


def question_sets(runs: Sequence[Run]) -> QuestionSets:
    """The runs' question sets, read from their folders each time (small files); the questions asked per run."""
    sets = [run_question_set(run.folder) for run in runs]
    shared = shared_question_set(sets)
    if shared is not None:
        return QuestionSets(question_set_line(shared, [questions_asked(run) for run in runs]), [])
    return QuestionSets(None, sets if any(sets) else [])


def questions_asked(run: Run) -> int:
    """Distinct question ids in the run's trajectory, counted again once it grew."""
    return run.index.memo("questions", lambda: len(set(run.index.columns["id"])))


SUMMARY_METRICS = {"EM": "em", "F1": "f1", "retrieval recall": "recall"}
"""The built-in metrics a run's summary shows first (the run's extra metrics follow), and their index columns."""


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    value: float | None
    ci: tuple[float, float] | None
    """Student-t 95% interval over questions (each question's mean over its scored repeats), clipped to [0, 1] when
    the values lie there (`rollout.report.scoring.metric_interval`, as in the evaluation summary)."""
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
    out_of_context: int
    tokens_per_task: float | None
    cost_per_task: float | None
    time_split: dict[str, float | None]
    """Mean seconds per task: total, llm, tools, waiting (None when no record carries accounting)."""
    calls_per_task: float
    complete: bool | None
    """The run's evaluation_summary.json says it finished every task (None before it is written)."""
    degraded_tools: dict[str, str]
    calibration: Calibration | None
    """From the run's evaluation_summary.json (None before it is written, or when no answer states a confidence)."""
    warnings: list[str]
    """The evaluation summary's warnings (tasks out of context, tools never called), each with its fix."""
    duplicates: int
    problems: list[str]
    skipped: int
    repeated: Repetition | None = None
    """Repeated tool calls and turns, from the run's evaluation_summary.json (None before it is written, or in one
    written before they were counted)."""


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
    return Metric(name, _mean(scored), metric_interval(means), len(means))


def run_summary(run: Run) -> RunSummaryView:
    """The summary box: its figures over every task computed once per state of the index, the run's
    evaluation_summary.json (written when it ends) read each time."""
    summary = read_summary(run.folder)
    view = run.index.memo("summary", lambda: _task_summary(run))
    return replace(view, metrics=view.metrics + _extra_metrics(run, scores(run)),
                   complete=None if summary is None else summary.complete,
                   degraded_tools={} if summary is None else dict(summary.degraded_tools),
                   calibration=None if summary is None else summary.calibration,
                   warnings=[] if summary is None else list(summary.warnings),
                   repeated=None if summary is None else summary.repeated_calls)


def scores(run: Run) -> ExtraScores:
    """The run's scores files, read again whenever `scores/` changed: a judge or a rescore may write them while the
    viewer serves, and a task page must not parse them all on every request."""
    folder = scores_dir(run.folder)
    state = tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir())) \
        if folder.is_dir() else ()
    if run._scores is None or run._scores[0] != state:
        try:
            extra = read_scores(run.folder)
        except ReportError as e:
            logger.warning("%s", e)
            extra = ExtraScores()
        run._scores = (state, extra)
    return run._scores[1]


def _extra_metrics(run: Run, extra: ExtraScores) -> list[Metric]:
    """Each extra metric over the run's scored tasks (those with an EM), as the built-in ones."""
    if not extra.metrics:
        return []
    cols = run.index.columns
    ids, n = cols["id"], len(run.index)
    one_each = len(set(ids)) == n
    values: dict[str, list[float | None]] = {m: [None] * n for m in extra.metrics}
    for i, key in enumerate(zip(ids, cols["repeat"], strict=True)):
        if cols["em"][i] is not None:
            for m, v in extra.of(key).items():
                values[m][i] = v
    return [_metric(m, ids, v, one_per_question=one_each) for m, v in values.items()]


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
        metrics=[_metric(name, ids, cols[column], one_per_question=one_each)
                 for name, column in SUMMARY_METRICS.items()],
        truncated=sum(cols["truncated"]), out_of_turns=sum(cols["out_of_turns"]),
        out_of_context=sum(cols["out_of_context"]),
        tokens_per_task=_mean([t for t in cols["tokens"] if t is not None]),
        cost_per_task=_mean([c for c in cols["cost"] if c is not None]),
        time_split=time_split, calls_per_task=(sum(cols["calls"]) / n) if n else 0.0,
        complete=None, degraded_tools={}, calibration=None, warnings=[],  # from the evaluation summary: `run_summary`
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
    and the tools table come first (`rollout.report.tool_calls.report`), so the object's members are parsed in order up to
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
    """`report compare` of the runs, the first as baseline; runs of different question sets too (`report compare
    --allow-different-questions`): the page names each run's set beside it and says that they differ."""
    return compare_runs([r.folder for r in runs], allow_different_questions=True)


def comparison_plots(c: Comparison) -> list[str]:
    """The comparison's plots (metrics, and costs when the runs carry accounting) as PNG data URIs."""
    import matplotlib

    matplotlib.use("Agg")
    from rollout.report.compare.cost_plot import plot_costs
    from rollout.report.compare.plot import plot_comparison

    uris = []
    with tempfile.TemporaryDirectory(prefix="rollout-view-") as tmp:
        for draw in (plot_comparison, plot_costs) if c.with_accounting else (plot_comparison,):
            png = draw(c, Path(tmp) / f"{draw.__name__}.png").read_bytes()
            uris.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    return uris


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table cell ("-" when unknown)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"
