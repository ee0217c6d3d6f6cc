"""Compare run folders: one row of metrics per mode, and each mode paired against a baseline.

Every number is rebuilt from `trajectory.jsonl`, streamed one task at a time and scored with
`rollout.scoring.score_task`, so a comparison agrees with each run's own evaluation summary.

Definitions
- EM, F1 and contains-answer are means over the run's tasks; retrieval recall is the mean over
  tasks with gold passage ids (None when no task has any).
- errors counts tasks that ended in an error other than a timeout; timeouts are counted apart.
- tool latency is the client's round trip (`latency_ms` of each trajectory tool call);
  quantiles use numpy's default linear interpolation, like `rollout.report.tool_stats`.
- tokens per task is the mean `usage.total_tokens` over tasks that report usage.
- The paired view looks only at task ids both runs finished. A flip is a task whose EM changed
  between the baseline and the run; the EM difference (run - baseline) gets a percentile
  bootstrap 95% CI from `BOOTSTRAP_RESAMPLES` resamples of the shared tasks, seeded so the same
  runs always give the same interval.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rollout.report.calls import run_labels, run_mode
from rollout.report.errors import NotARunFolderError, ReportError
from rollout.run_folder import TRAJECTORY_FILE, iter_trajectory
from rollout.scoring import score_task

logger = logging.getLogger(__name__)

COMPARISON_MD = "comparison.md"
COMPARISON_PNG = "comparison.png"
BOOTSTRAP_RESAMPLES = 10_000
CI_LEVEL = 0.95
DEFAULT_SEED = 0
_RESAMPLE_CELLS = 4_000_000
"""Indices drawn per bootstrap batch: bounds memory (~32 MB) whatever the number of tasks."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run folder summarised for the comparison table."""

    label: str
    """Name shown in tables: the mode, plus the folder when two runs share a mode."""
    mode: str
    """`mode_name` from the run's config.yaml, else the folder's name."""
    run_dir: Path
    """The run folder."""
    tasks: int
    """Tasks in trajectory.jsonl."""
    exact_match: float | None
    """Mean EM (None without tasks)."""
    f1: float | None
    """Mean token F1."""
    contains_answer: float | None
    """Mean contains-answer."""
    retrieval_recall: float | None
    """Mean per-task retrieval recall over tasks with gold ids (None when no task has any)."""
    calls_per_task: dict[str, float]
    """Tool calls per task, by tool name (sorted by name)."""
    latency_p50_ms: float | None
    """Median client round trip of a tool call (None without calls that report one)."""
    latency_p95_ms: float | None
    """95th percentile client round trip of a tool call."""
    errors: int
    """Tasks that ended in an error other than a timeout."""
    timeouts: int
    """Tasks that hit their time limit."""
    tokens_per_task: float | None
    """Mean total tokens per task over tasks reporting usage (None when none does)."""

    @property
    def total_calls_per_task(self) -> float:
        return sum(self.calls_per_task.values())


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """One run against the baseline, on the task ids both finished."""

    label: str
    """The run's label."""
    baseline: str
    """The baseline's label."""
    shared: int
    """Task ids in both runs."""
    only_in_run: int
    """Task ids only the run has."""
    only_in_baseline: int
    """Task ids only the baseline has."""
    em_run: float | None
    """The run's EM on the shared tasks (None when nothing is shared)."""
    em_baseline: float | None
    """The baseline's EM on the shared tasks."""
    em_diff: float | None
    """em_run - em_baseline."""
    ci_low: float | None
    """Lower end of the bootstrap CI of em_diff."""
    ci_high: float | None
    """Upper end of the bootstrap CI of em_diff."""
    wrong_to_right: int
    """Shared tasks the baseline got wrong and the run got right (by EM)."""
    right_to_wrong: int
    """Shared tasks the baseline got right and the run got wrong."""

    @property
    def not_shared(self) -> int:
        return self.only_in_run + self.only_in_baseline


@dataclass(frozen=True, slots=True)
class Comparison:
    """Rows of every run and the paired comparisons against the baseline."""

    rows: list[RunRow]
    """One per run, in the order given."""
    baseline: str
    """Label of the baseline row."""
    pairs: list[PairedComparison]
    """Every other run against the baseline, in row order."""
    seed: int
    """Seed of the bootstrap."""
    resamples: int
    """Bootstrap resamples per pair."""

    @property
    def tools(self) -> list[str]:
        """Every tool name any run called, sorted."""
        return sorted({t for r in self.rows for t in r.calls_per_task})


@dataclass(frozen=True, slots=True)
class _ScoredRun:
    row: RunRow
    em: dict[str, float]
    """EM per task id, for pairing."""


# ---------------------------------------------------------------- finding and reading runs

def _is_run(path: Path) -> bool:
    return (path / TRAJECTORY_FILE).is_file()


def find_runs(paths: Sequence[Path | str]) -> list[Path]:
    """Run folders named by `paths`: a folder with trajectory.jsonl is a run; any other folder
    stands for its subfolders that are runs (sorted by name), e.g. results/demo → its modes."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise NotARunFolderError(
                f"{path}: no such folder; pass run folders such as results/<experiment>/<mode>, or their parent"
            )
        if _is_run(path):
            runs = [path]
        else:
            runs = sorted((p for p in path.iterdir() if p.is_dir() and _is_run(p)), key=lambda p: p.name)
        if not runs:
            raise NotARunFolderError(
                f"{path}: no {TRAJECTORY_FILE} here or in its subfolders; run `python -m rollout mode=<mode>` "
                "to make a run folder, or pass one such as results/<experiment>/<mode>"
            )
        found += [r for r in runs if r.resolve() not in {f.resolve() for f in found}]
    return found


def _quantile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), 100 * q)), 3) if values else None


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(np.asarray(values, dtype=np.float64))), 4) if values else None


def _score_run(run_dir: Path, label: str) -> _ScoredRun:
    em: dict[str, float] = {}
    metrics: dict[str, list[float]] = {"exact_match": [], "f1": [], "contains_answer": [], "retrieval_recall": []}
    calls: Counter[str] = Counter()
    latencies: list[float] = []
    tokens: list[float] = []
    errors = timeouts = duplicates = 0
    for task in iter_trajectory(run_dir / TRAJECTORY_FILE):
        if task.id in em:  # resume keeps one line per id; a second one is stale, as there
            duplicates += 1
            continue
        s = score_task(task)
        em[task.id] = s["exact_match"]
        for key, values in metrics.items():
            if s[key] is not None:
                values.append(s[key])
        calls.update(str(c.get("name")) for c in task.tool_calls)
        latencies += [float(c["latency_ms"]) for c in task.tool_calls if isinstance(c.get("latency_ms"), (int, float))]
        if s["total_tokens"] is not None:
            tokens.append(float(s["total_tokens"]))
        timeouts += s["timeout"]
        errors += s["error"]
    if duplicates:
        logger.warning("%s: %d repeated task ids; kept the first line of each", run_dir / TRAJECTORY_FILE, duplicates)
    n = len(em)
    row = RunRow(
        label=label, mode=run_mode(run_dir), run_dir=run_dir, tasks=n,
        **{key: _mean(values) for key, values in metrics.items()},
        calls_per_task={t: round(c / n, 3) for t, c in sorted(calls.items())} if n else {},
        latency_p50_ms=_quantile(latencies, 0.5), latency_p95_ms=_quantile(latencies, 0.95),
        errors=int(errors), timeouts=int(timeouts), tokens_per_task=_mean(tokens),
    )
    return _ScoredRun(row, em)


def _labels(runs: list[Path], root: Path) -> list[str]:
    modes = run_labels(runs)  # the mode, plus the overrides that tell the runs apart
    counts = Counter(modes)

    def where(run: Path) -> str:
        try:
            return str(run.resolve().relative_to(root.resolve()))
        except ValueError:
            return str(run)

    return [m if counts[m] == 1 else f"{m} ({where(r)})" for m, r in zip(modes, runs, strict=True)]


def common_parent(runs: Sequence[Path]) -> Path:
    """The deepest folder holding every run folder (where comparison files go by default)."""
    return Path(os.path.commonpath([str(Path(r).resolve().parent) for r in runs]))


# ---------------------------------------------------------------- pairing

def bootstrap_ci(
    diffs: np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED, level: float = CI_LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of paired differences `diffs`."""
    diffs = np.asarray(diffs, dtype=np.float64)
    n = len(diffs)
    if n == 0:
        raise ValueError("bootstrap_ci needs at least one paired difference")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    batch = max(1, _RESAMPLE_CELLS // n)
    for start in range(0, resamples, batch):
        stop = min(start + batch, resamples)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.int64)
        means[start:stop] = diffs[idx].mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def pair(run: _ScoredRun, base: _ScoredRun, *, resamples: int, seed: int) -> PairedComparison:
    shared = [t for t in base.em if t in run.em]  # baseline order: the same ids give the same resamples
    only_run = sum(t not in base.em for t in run.em)
    only_base = len(base.em) - len(shared)
    if not shared:
        return PairedComparison(run.row.label, base.row.label, 0, only_run, only_base,
                                None, None, None, None, None, 0, 0)
    r = np.array([run.em[t] for t in shared], dtype=np.float64)
    b = np.array([base.em[t] for t in shared], dtype=np.float64)
    low, high = bootstrap_ci(r - b, resamples=resamples, seed=seed)
    return PairedComparison(
        label=run.row.label, baseline=base.row.label, shared=len(shared),
        only_in_run=only_run, only_in_baseline=only_base,
        em_run=float(r.mean()), em_baseline=float(b.mean()), em_diff=float((r - b).mean()),
        ci_low=low, ci_high=high,
        wrong_to_right=int(((b == 0) & (r > 0)).sum()), right_to_wrong=int(((b > 0) & (r == 0)).sum()),
    )


def _pick_baseline(rows: list[RunRow], baseline: str | None) -> int:
    if baseline is None:
        return 0
    for i, row in enumerate(rows):
        if row.label == baseline:
            return i
    matches = [i for i, row in enumerate(rows) if row.mode == baseline]
    if len(matches) == 1:
        return matches[0]
    labels = ", ".join(r.label for r in rows)
    if matches:
        raise ReportError(f"--baseline {baseline}: several runs have this mode; pass one of: {labels}")
    raise ReportError(f"--baseline {baseline}: no run has this mode; the runs are: {labels}")


def compare_runs(
    paths: Sequence[Path | str], *, baseline: str | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED,
) -> Comparison:
    """Score the runs named by `paths` (run folders or their parents) and pair each with the
    baseline (`baseline` names a mode or label; default the first run)."""
    runs = find_runs(paths)
    labels = _labels(runs, common_parent(runs))
    scored = [_score_run(run, label) for run, label in zip(runs, labels, strict=True)]
    rows = [s.row for s in scored]
    b = _pick_baseline(rows, baseline)
    pairs = [pair(s, scored[b], resamples=resamples, seed=seed) for i, s in enumerate(scored) if i != b]
    return Comparison(rows=rows, baseline=rows[b].label, pairs=pairs, seed=seed, resamples=resamples)


# ---------------------------------------------------------------- tables and markdown

def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _signed(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:+.{digits}f}"


def pair_sentence(p: PairedComparison) -> str:
    """E.g. "sparse vs dense: EM +0.185 [95% CI +0.120, +0.250] on 200 shared tasks; 41 wrong→right, 4 right→wrong"."""
    if not p.shared:
        return f"{p.label} vs {p.baseline}: no shared task ids ({p.only_in_run} only in {p.label}, " \
               f"{p.only_in_baseline} only in {p.baseline}); nothing to pair"
    text = (
        f"{p.label} vs {p.baseline}: EM {_signed(p.em_diff)} [{100 * CI_LEVEL:.0f}% CI {_signed(p.ci_low)}, "
        f"{_signed(p.ci_high)}] on {p.shared} shared tasks; {p.wrong_to_right} wrong→right, "
        f"{p.right_to_wrong} right→wrong"
    )
    if p.not_shared:
        text += f"; {p.not_shared} task ids not shared ({p.only_in_run} only in {p.label}, " \
                f"{p.only_in_baseline} only in {p.baseline})"
    return text


Table = tuple[str, list[str], list[list[str]]]
"""(title, column headers, rows of cells): one shape for markdown and the terminal alike."""


def comparison_tables(c: Comparison) -> list[Table]:
    """The comparison's tables: per mode, tool calls per task, and against the baseline."""
    metrics = (
        "per mode",
        ["mode", "tasks", "EM", "F1", "contains", "recall", "calls/task", "tool p50 ms", "tool p95 ms",
         "errors", "timeouts", "tokens/task"],
        [[r.label, str(r.tasks), _num(r.exact_match), _num(r.f1), _num(r.contains_answer),
          _num(r.retrieval_recall), _num(r.total_calls_per_task, 2), _num(r.latency_p50_ms, 1),
          _num(r.latency_p95_ms, 1), str(r.errors), str(r.timeouts), _num(r.tokens_per_task, 1)]
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
        f"against {c.baseline} (paired on shared task ids)",
        ["mode", "shared", f"EM {c.baseline}", "EM mode", "ΔEM", f"{100 * CI_LEVEL:.0f}% CI",
         "wrong→right", "right→wrong", "not shared"],
        [[p.label, str(p.shared), _num(p.em_baseline), _num(p.em_run), _signed(p.em_diff),
          "-" if p.ci_low is None else f"[{_signed(p.ci_low)}, {_signed(p.ci_high)}]",
          str(p.wrong_to_right), str(p.right_to_wrong), str(p.not_shared)]
         for p in c.pairs],
    )
    return [metrics, calls, paired] if c.pairs else [metrics, calls]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(headers: list[str], rows: list[list[str]], *, numbers: bool = True) -> str:
    """A markdown table; with `numbers`, every column after the first is right-aligned."""
    lines = ["| " + " | ".join(map(_md_cell, headers)) + " |",
             "|" + "|".join(["---", *["---:" if numbers else "---"] * (len(headers) - 1)]) + "|"]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(c: Comparison, *, plot: str | None = None) -> str:
    """comparison.md: a sentence per pair, the tables, the figure `plot` (a relative path) when
    given, and the run folders."""
    parts = [f"# Comparison of {len(c.rows)} runs", ""]
    if c.pairs:
        parts += [
            f"Baseline: **{c.baseline}**. EM differences are paired on the task ids both runs finished; "
            f"{100 * CI_LEVEL:.0f}% CIs are percentile bootstraps over those tasks "
            f"({c.resamples:,} resamples, seed {c.seed}).", "",
            *(f"- {pair_sentence(p)}" for p in c.pairs), "",
        ]
    for title, headers, rows in comparison_tables(c):
        parts += [f"## {title[0].upper()}{title[1:]}", "", _md_table(headers, rows), ""]
    if plot is not None:
        parts += [f"![comparison]({plot})", ""]
    parts += ["## Runs", "", _md_table(["mode", "folder"], [[r.label, str(r.run_dir)] for r in c.rows], numbers=False), ""]
    return "\n".join(parts)


def write_comparison(c: Comparison, out_dir: Path | str) -> list[Path]:
    """Write comparison.png (when matplotlib is installed) and comparison.md into `out_dir`;
    returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    # The figure is optional: without matplotlib the tables still get written.
    try:
        from rollout.report.compare_plot import plot_comparison
    except ImportError as e:
        logger.warning("%s not written: %s (pip install matplotlib)", out_dir / COMPARISON_PNG, e)
    else:
        written.append(plot_comparison(c, out_dir / COMPARISON_PNG))
    md = out_dir / COMPARISON_MD
    md.write_text(render_markdown(c, plot=written[0].name if written else None), encoding="utf-8")
    return [md, *written]
