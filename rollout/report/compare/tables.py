"""A comparison for people and programs: the printed tables, one sentence per pairing, comparison.md with its
figures, and the same numbers as comparison.json and comparison.csv."""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rollout.benchmark_scores import BROWSECOMP_PLUS_NAMES
from rollout.report.browsecomp_leaderboard import leaderboard_cells, search_columns
from rollout.report.compare.comparison import Comparison
from rollout.report.compare.cost_plot import plot_costs
from rollout.report.compare.paired import CI_LEVEL, RIGHT_ABOVE, MetricDiff, PairedComparison
from rollout.report.compare.plot import plot_comparison
from rollout.report.compare.run_row import RunRow
from rollout.report.scoring import METRICS, metric_label

logger = logging.getLogger(__name__)

COMPARISON_MD = "comparison.md"
COMPARISON_PNG = "comparison.png"
COMPARISON_COSTS_PNG = "comparison_costs.png"
COMPARISON_JSON = "comparison.json"
COMPARISON_CSV = "comparison.csv"


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _signed(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:+.{digits}f}"


def _percent(change: float | None) -> str:
    """A relative change as "-40%" ("+0%" for none)."""
    return "-" if change is None else f"{100 * change:+.0f}%"


def _ci(d: MetricDiff) -> str:
    return "-" if d.ci_low is None else f"[{_signed(d.ci_low)}, {_signed(d.ci_high)}]"


def pair_sentence(p: PairedComparison) -> str:
    """E.g. "sparse vs dense: EM +0.185 [95% CI +0.120, +0.250] on 200 shared questions; 41 wrong→right,
    4 right→wrong; F1 +0.150 [...], contains ..., recall ..."."""
    if not p.shared:
        return f"{p.label} vs {p.baseline}: no shared question ids ({p.only_in_run} only in {p.label}, " \
               f"{p.only_in_baseline} only in {p.baseline}); nothing to pair"
    text = (
        f"{p.label} vs {p.baseline}: EM {_signed(p.em_diff)} [{100 * CI_LEVEL:.0f}% CI {_signed(p.ci_low)}, "
        f"{_signed(p.ci_high)}] on {p.shared} shared questions; {p.wrong_to_right} wrong→right, "
        f"{p.right_to_wrong} right→wrong"
    )
    others = [f"{metric_label(m)} {_signed(d.diff)} {_ci(d)}" for m, d in p.metrics.items()
              if m != "exact_match" and d.diff is not None]
    if others:
        text += "; " + ", ".join(others)
    if p.missing:
        text += "; " + ", ".join(f"{m} missing in {side}" for m, side in p.missing.items())
    if p.context_change is not None:
        text += f"; context tokens per task {_percent(p.context_change)}"
    if p.not_shared:
        text += f"; {p.not_shared} question ids not shared ({p.only_in_run} only in {p.label}, " \
                f"{p.only_in_baseline} only in {p.baseline})"
    return text


Table = tuple[str, list[str], list[list[str]]]
"""(title, column headers, rows of cells): one shape for markdown and the terminal alike."""
TEXT_COLUMNS = frozenset({"question set"})
"""Columns of text, aligned left like the first one; the others hold numbers, aligned right."""


def _cost_columns(c: Comparison) -> dict[str, Callable[[RunRow], str]]:
    """Header → cell of the per-mode table's accounting columns: none when no run has accounting; agent and
    tool LLM tokens only when some run has them; the context change only when there is a baseline to pair."""
    if not c.with_accounting:
        return {}
    columns: dict[str, Callable[[RunRow], str]] = {"context tokens/task": lambda r: _num(r.context_tokens_per_task, 1)}
    if c.pairs:
        columns[f"context vs {c.baseline}"] = lambda r: _percent(c.context_change(r))
    if any(r.agent_tokens_per_task for r in c.rows):
        columns["agent tokens/task"] = lambda r: _num(r.agent_tokens_per_task, 1)
    if any(r.tool_llm_tokens_per_task for r in c.rows):
        columns["tool LLM tokens/task"] = lambda r: _num(r.tool_llm_tokens_per_task, 1)
    columns["LLM s/task"] = lambda r: _num(r.llm_s_per_task)
    columns["tool s/task"] = lambda r: _num(r.tool_s_per_task)
    return columns


def comparison_tables(c: Comparison) -> list[Table]:
    """The comparison's tables: per mode, tool calls per task, and against the baseline (every
    metric with its CI, then the flips)."""
    costs = _cost_columns(c)
    names = c.metrics
    calibration = ["calibration error"] if c.with_calibration else []
    sets = ["question set"] if c.question_sets_differ else []  # one set: a line above the tables says which
    metrics = (
        "per mode",
        ["mode", *sets, "tasks", "scored", *map(metric_label, names), *calibration, "calls/task", "tool p50 ms",
         "tool p95 ms", "errors", "timeouts", "infra", "truncated", "out of turns", "out of ctx", "repeated calls",
         "tokens/task", *costs],
        [[r.label, *([str(r.question_set or "-")] if sets else []), str(r.tasks), str(r.scored),
          *(_num(r.metric(m)) if r.has(m) else "missing" for m in names),
          *([_calibration_cell(r)] if calibration else []), _num(r.total_calls_per_task, 2), _num(r.latency_p50_ms, 1),
          _num(r.latency_p95_ms, 1), str(r.errors), str(r.timeouts), str(r.infra_errors), str(r.truncated),
          str(r.out_of_turns), str(r.out_of_context), _repeated_cell(r), _num(r.tokens_per_task, 1),
          *(cell(r) for cell in costs.values())]
         for r in c.rows],
    )
    tools = c.tools
    calls = (
        "tool calls per task",
        ["mode", *tools, "total"],
        [[r.label, *(_num(r.calls_per_task.get(t, 0.0), 2) for t in tools), _num(r.total_calls_per_task, 2)]
         for r in c.rows],
    )
    paired = (
        f"against {c.baseline} (paired on shared questions, repeats averaged)",
        ["mode", "metric", "questions", c.baseline, "mode value", "Δ", f"{100 * CI_LEVEL:.0f}% CI"],
        [row for p in c.pairs for row in (
            *([p.label, metric_label(m), str(d.questions), _num(d.baseline), _num(d.run), _signed(d.diff), _ci(d)]
              for m, d in p.metrics.items()),
            *([p.label, m, "-", *(_num(c.row(label).metric(m)) if label != side else f"missing in {side}"
                                  for label in (c.baseline, p.label)), "-", "-"]
              for m, side in p.missing.items()),
        )],
    )
    flips = (
        f"flips against {c.baseline} (EM)",
        ["mode", "shared", "wrong→right", "right→wrong", "not shared"],
        [[p.label, str(p.shared), str(p.wrong_to_right), str(p.right_to_wrong), str(p.not_shared)] for p in c.pairs],
    )
    browsecomp = _browsecomp_table(c)
    return [metrics, calls, *browsecomp, *([paired, flips] if c.pairs else [])]


def _browsecomp_table(c: Comparison) -> list[Table]:
    """BrowseComp-Plus' leaderboard numbers side by side, for the runs that have them (none: no table)."""
    runs = [r for r in c.rows if r.browsecomp_plus is not None]
    if not runs:
        return []
    split = list(dict.fromkeys(t for r in runs for t in search_columns(r.browsecomp_plus)))
    cells = [leaderboard_cells(r.browsecomp_plus, split) for r in runs]
    return [("BrowseComp-Plus leaderboard numbers",
             ["mode", "queries", "answered", "judged", *cells[0]],
             [[r.label, str(r.browsecomp_plus.queries), str(r.browsecomp_plus.answered),
               str(r.browsecomp_plus.judged), *row.values()] for r, row in zip(runs, cells, strict=True)])]


def _repeated_cell(r: RunRow) -> str:
    """E.g. "12 (31%)": the run's tool calls repeating an earlier call of their task, and their share of its calls."""
    share = r.repeated_call_share
    return str(r.repeated_calls) if share is None else f"{r.repeated_calls} ({share:.0%})"


def _calibration_cell(r: RunRow) -> str:
    """E.g. "0.300 (n=6, judge_correct)"; "-" when no answer states a confidence."""
    cal = r.calibration
    return "-" if cal is None else f"{cal.error:.3f} (n={cal.n}, {cal.correct_by})"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(headers: list[str], rows: list[list[str]], *, numbers: bool = True) -> str:
    """A markdown table; with `numbers`, every column after the first is right-aligned."""
    lines = ["| " + " | ".join(map(_md_cell, headers)) + " |",
             "|" + "|".join(["---", *("---:" if numbers and h not in TEXT_COLUMNS else "---" for h in headers[1:])])
             + "|"]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(c: Comparison, *, plot: str | None = None, costs_plot: str | None = None) -> str:
    """comparison.md: a sentence per pair, the tables, the figures `plot` and `costs_plot` (relative paths)
    when given, and the run folders."""
    parts = [f"# Comparison of {len(c.rows)} runs", ""]
    if (line := c.question_set_line) is not None:
        parts += [f"{line[0].upper()}{line[1:]}.", ""]
    if c.pairs:
        parts += [
            f"Baseline: **{c.baseline}**. Differences are paired on the question ids both runs scored, "
            f"each question's value averaged over its repeats; {100 * CI_LEVEL:.0f}% CIs are percentile "
            f"bootstraps over those questions ({c.resamples:,} resamples, seed {c.seed}). For flips a question "
            f"is right when its repeat-averaged EM is above {RIGHT_ABOVE}. Records that ended in error, timeout or "
            + ("infra_error are scored as wrong answers." if c.score_failed else "infra_error are left out."), "",
            *(f"- {pair_sentence(p)}" for p in c.pairs), "",
        ]
    for title, headers, rows in comparison_tables(c):
        parts += [f"## {title[0].upper()}{title[1:]}", "", _md_table(headers, rows), ""]
    if plot is not None:
        parts += [f"![comparison]({plot})", ""]
    if costs_plot is not None:
        parts += [f"![where a task's time and tokens go]({costs_plot})", ""]
    parts += ["## Runs", "", _md_table(["mode", "folder"], [[r.label, str(r.run_dir)] for r in c.rows], numbers=False), ""]
    return "\n".join(parts)


def comparison_json(c: Comparison) -> dict[str, Any]:
    """Every number of the printed tables, unrounded: the runs' rows and each pair's metric differences and flips."""
    return {
        "baseline": c.baseline, "ci_level": CI_LEVEL, "resamples": c.resamples, "seed": c.seed,
        "score_failed": c.score_failed,
        "question_set": None if c.question_set is None else asdict(c.question_set),
        "runs": [{**asdict(r), "run_dir": str(r.run_dir), "total_calls_per_task": r.total_calls_per_task,
                  "accounting": None if r.accounting is None else r.accounting.to_json(), **_costs(c, r),
                  "browsecomp_plus": None if r.browsecomp_plus is None else r.browsecomp_plus.to_json()}
                 for r in c.rows],
        "pairs": [{**asdict(p), "not_shared": p.not_shared} for p in c.pairs],
    }


def _costs(c: Comparison, r: RunRow) -> dict[str, float | None]:
    """The run's accounting per task, flat, and its context change against the baseline (None without)."""
    return {"context_tokens_per_task": r.context_tokens_per_task, "context_change": c.context_change(r),
            "agent_tokens_per_task": r.agent_tokens_per_task, "tool_llm_tokens_per_task": r.tool_llm_tokens_per_task,
            "llm_s_per_task": r.llm_s_per_task, "tool_s_per_task": r.tool_s_per_task}


def _write_csv(c: Comparison, path: Path) -> None:
    """The per-mode table, one row per run, tool calls per task in a column per tool, then the accounting."""
    extra = [m for m in c.metrics if m not in METRICS]
    browsecomp = _browsecomp_columns(c)
    fields = ["label", "mode", "run_dir", "question_set", "question_set_sha256", "tasks", "scored", "repeats",
              "questions", *METRICS, *extra, "calibration_error",
              *(f"calls_per_task.{t}" for t in c.tools), "total_calls_per_task",
              "latency_p50_ms", "latency_p95_ms", "errors", "timeouts", "infra_errors", "truncated", "out_of_turns",
              "out_of_context", "tokens_per_task", "repeated_calls", "repeated_call_share", "repeated_turns",
              "looping_tasks",
              *_costs(c, c.rows[0]), *browsecomp]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for r in c.rows:
            row = {k: v for k, v in asdict(r).items()
                   if k not in ("calls_per_task", "accounting", "extra", "calibration", "browsecomp_plus")}
            numbers = {} if r.browsecomp_plus is None else r.browsecomp_plus.to_json()
            row |= {column: numbers.get(column.removeprefix("browsecomp_plus.")) for column in browsecomp}
            row |= {m: r.extra.get(m) for m in extra}
            row["calibration_error"] = None if r.calibration is None else r.calibration.error
            row["question_set"] = None if r.question_set is None else r.question_set.name
            row["question_set_sha256"] = None if r.question_set is None else r.question_set.sha256
            row |= {f"calls_per_task.{t}": r.calls_per_task.get(t, 0.0) for t in c.tools} | _costs(c, r)
            writer.writerow({**row, "run_dir": str(r.run_dir), "total_calls_per_task": r.total_calls_per_task})


def _browsecomp_columns(c: Comparison) -> list[str]:
    """CSV columns of BrowseComp-Plus' numbers (`browsecomp_plus.Accuracy (%)`, ...) when some run has them."""
    if all(r.browsecomp_plus is None for r in c.rows):
        return []
    return [f"browsecomp_plus.{name}" for name in ("queries", "answered", "judged", *BROWSECOMP_PLUS_NAMES.values())]


def write_comparison(c: Comparison, out_dir: Path | str) -> list[Path]:
    """Write comparison.png, comparison_costs.png (when some run has accounting), comparison.md, comparison.json
    and comparison.csv into `out_dir`; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_comparison(c, out_dir / COMPARISON_PNG)
    costs = out_dir / COMPARISON_COSTS_PNG
    if c.with_accounting:
        plot_costs(c, costs)
    else:
        costs.unlink(missing_ok=True)  # left by an earlier comparison in this folder: it would not be of these runs
    figures = [plot, *([costs] if c.with_accounting else [])]
    md = out_dir / COMPARISON_MD
    md.write_text(render_markdown(c, plot=plot.name, costs_plot=costs.name if c.with_accounting else None),
                  encoding="utf-8")
    data = out_dir / COMPARISON_JSON
    data.write_text(json.dumps(comparison_json(c), indent=2) + "\n", encoding="utf-8")
    table = out_dir / COMPARISON_CSV
    _write_csv(c, table)
    return [md, *figures, data, table]
