"""Compare run folders: one row of metrics per mode, and each mode paired against a baseline.

Every number is rebuilt from `trajectory.jsonl`, streamed one task at a time and scored with
`rollout.report.scoring.score_task`, so a comparison agrees with each run's own evaluation summary.

Definitions
- A record is one (question, repeat). Records that ended in `error`, `timeout` or `infra_error`
  are counted per run and left out of the metrics, as in the summary (`score_failed=True` scores
  them as wrong answers instead).
- EM, F1 and contains-answer are means over the run's scored records; retrieval recall is the
  mean over scored records with gold passage ids (None when no record has any).
- truncated counts records whose answer the model's endpoint cut at its token limit (finish_reason
  `length`): they keep status ok and are scored as they stand, so they are among the scored records. Likewise
  out of turns and out of context count the records whose agent ran out of turns or outgrew the model's context
  window: scored (as the answer they had, usually none) on both sides of a pair, never left out.
- tool latency is the client's round trip (`latency_ms` of each trajectory tool call);
  quantiles use numpy's default linear interpolation, like `rollout.report.tool_stats`.
- tokens per task is the mean `usage.total_tokens` over records that report usage.
- context tokens, agent tokens, tool LLM tokens, LLM seconds and tool seconds per task are the run's
  accounting (`rollout.report.costs`, the summary's `accounting`): means over every record, scored
  or not; the context change against the baseline is run / baseline - 1.
- The paired view has questions as its unit: the question ids both runs scored, each question's
  value being the mean of its scored repeats. Every metric's difference (run - baseline) gets a
  percentile bootstrap 95% CI from `BOOTSTRAP_RESAMPLES` resamples of those questions, seeded so
  the same runs always give the same interval (recall pairs only questions with gold passages).
- Extra metrics (a run's `scores/*.jsonl`: its own scorers', a judge's) are compared like the built-in ones when
  both runs have them; one that only one run has is listed as missing on the other side.
- calibration error is each run's own (`rollout.report.calibration`), over its scored answers that state a
  confidence; it is not paired.
- A run's question set is named from its config.yaml and known by the hash in its fingerprint.json
  (`rollout.report.question_set`): runs of different sets are refused unless `allow_different_questions`; a run's
  `questions` are the distinct question ids it asked.
- A flip is a question right in one run and wrong in the other, "right" meaning a repeat-averaged
  EM above 0.5 (right in most of its repeats; with one repeat, simply right).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rollout.errors import NotARunFolderError, ReportError
from rollout.report.calibration import CalibrationTally, correctness_metric, task_confidence
from rollout.report.calls import run_labels, run_mode
from rollout.report.costs import AccountingTally
from rollout.report.extra_scores import read_scores
from rollout.report.question_set import (
    RunQuestionSet,
    check_one_question_set,
    question_set_line,
    run_question_set,
    shared_question_set,
)
from rollout.report.scoring import METRICS, score_task
from rollout.run_folder import TRAJECTORY_FILE, is_run_folder, iter_trajectory
from rollout.summary import Calibration, RunAccounting

logger = logging.getLogger(__name__)

BOOTSTRAP_RESAMPLES = 10_000
CI_LEVEL = 0.95
DEFAULT_SEED = 0
_RESAMPLE_CELLS = 4_000_000
"""Indices drawn per bootstrap batch: bounds memory (~32 MB) whatever the number of tasks."""
RIGHT_ABOVE = 0.5
"""A question is right (for flips) when its EM averaged over its repeats is above this."""


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
    """Records (question, repeat) in trajectory.jsonl."""
    scored: int
    """Records that entered the metrics."""
    repeats: int
    """Repeats of the run (highest `repeat` + 1)."""
    questions: int
    """Distinct question ids in trajectory.jsonl: the questions of its set the run asked."""
    exact_match: float | None
    """Mean EM over scored records (None without any)."""
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
    """Records with status `error`."""
    timeouts: int
    """Records with status `timeout`."""
    infra_errors: int
    """Records with status `infra_error` (a tool call failed for infrastructure reasons)."""
    truncated: int
    """Records whose answer was cut at the model's token limit (status ok, so among the scored ones)."""
    out_of_turns: int
    """Records whose agent used all its turns without answering (among the scored ones)."""
    out_of_context: int
    """Records whose conversation outgrew the model's context window (among the scored ones)."""
    tokens_per_task: float | None
    """Mean total tokens per task over tasks reporting usage (None when none does)."""
    accounting: RunAccounting | None = None
    """Where the run's tasks spent their time and tokens, as its summary's `accounting` (None when no record
    carries accounting)."""
    extra: dict[str, float | None] = field(default_factory=dict)
    """Mean of each extra metric the run has (its scores files), in their order."""
    calibration: Calibration | None = None
    """Calibration of the run's scored answers that state a confidence (None when none does)."""
    question_set: RunQuestionSet | None = None
    """The question set the run asked (None when its folder does not say)."""

    def metric(self, name: str) -> float | None:
        """The run's mean of a built-in or extra metric (None when it has no value, or no such metric)."""
        return getattr(self, name) if name in METRICS else self.extra.get(name)

    def has(self, name: str) -> bool:
        return name in METRICS or name in self.extra

    @property
    def total_calls_per_task(self) -> float:
        return sum(self.calls_per_task.values())

    @property
    def context_tokens_per_task(self) -> float | None:
        return None if self.accounting is None else self.accounting.context_tokens

    @property
    def agent_tokens_per_task(self) -> float | None:
        return None if self.accounting is None else self.accounting.agent_tokens

    @property
    def tool_llm_tokens_per_task(self) -> float | None:
        return None if self.accounting is None else self.accounting.tool_llm_tokens

    @property
    def llm_s_per_task(self) -> float | None:
        return None if self.accounting is None else self.accounting.time_s.llm

    @property
    def tool_s_per_task(self) -> float | None:
        return None if self.accounting is None else self.accounting.time_s.tools


@dataclass(frozen=True, slots=True)
class MetricDiff:
    """One metric of a run against the baseline, paired by question."""

    metric: str
    """A built-in metric (`rollout.report.scoring.METRICS`) or an extra one both runs have."""
    questions: int
    """Shared questions where both runs have a value (fewer for recall: those with gold passages)."""
    run: float | None
    """The run's mean over those questions (None when there are none)."""
    baseline: float | None
    """The baseline's mean over those questions."""
    diff: float | None
    """run - baseline."""
    ci_low: float | None
    """Lower end of the paired bootstrap CI of diff."""
    ci_high: float | None
    """Upper end of the paired bootstrap CI of diff."""


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """One run against the baseline, on the question ids both scored."""

    label: str
    """The run's label."""
    baseline: str
    """The baseline's label."""
    shared: int
    """Question ids both runs scored."""
    only_in_run: int
    """Question ids only the run scored."""
    only_in_baseline: int
    """Question ids only the baseline scored."""
    metrics: dict[str, MetricDiff]
    """Every metric's paired difference: the built-in ones, then the extra ones both runs have."""
    wrong_to_right: int
    """Shared questions the baseline got wrong and the run got right (repeat-averaged EM > 0.5)."""
    right_to_wrong: int
    """Shared questions the baseline got right and the run got wrong."""
    context_change: float | None = None
    """Relative change of context tokens per task, run / baseline - 1, over each run's every record (not paired;
    None unless both runs have accounting and the baseline's context is not empty)."""
    missing: dict[str, str] = field(default_factory=dict)
    """Extra metrics only one side has → the label of the side that lacks it."""

    @property
    def not_shared(self) -> int:
        return self.only_in_run + self.only_in_baseline

    @property
    def em(self) -> MetricDiff:
        return self.metrics["exact_match"]

    @property
    def em_run(self) -> float | None:
        return self.em.run

    @property
    def em_baseline(self) -> float | None:
        return self.em.baseline

    @property
    def em_diff(self) -> float | None:
        return self.em.diff

    @property
    def ci_low(self) -> float | None:
        return self.em.ci_low

    @property
    def ci_high(self) -> float | None:
        return self.em.ci_high


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
    """Bootstrap resamples per pair and metric."""
    score_failed: bool = False
    """Whether failed records were scored as wrong answers (else left out)."""

    @property
    def metrics(self) -> list[str]:
        """Every metric some run has: the built-in ones, then the extra ones in the order the runs name them."""
        return list(dict.fromkeys([*METRICS, *(m for r in self.rows for m in r.extra)]))

    @property
    def with_calibration(self) -> bool:
        return any(r.calibration is not None for r in self.rows)

    @property
    def tools(self) -> list[str]:
        """Every tool name any run called, sorted."""
        return sorted({t for r in self.rows for t in r.calls_per_task})

    @property
    def question_set(self) -> RunQuestionSet | None:
        """The one question set every run asked; None when they differ (`--allow-different-questions`) or a run
        does not say which it asked."""
        return shared_question_set([r.question_set for r in self.rows])

    @property
    def question_set_line(self) -> str | None:
        """`question set: NAME (N questions, hash abc12345)` when every run asked one set (else each run's set is a
        column of the per-mode table); None when the runs do not say."""
        shared = self.question_set
        return None if shared is None else question_set_line(shared, [r.questions for r in self.rows])

    @property
    def question_sets_differ(self) -> bool:
        """Whether the runs name question sets that are not all one (each run's is then shown beside it)."""
        return self.question_set is None and any(r.question_set is not None for r in self.rows)

    def row(self, label: str) -> RunRow:
        return next(r for r in self.rows if r.label == label)

    @property
    def baseline_row(self) -> RunRow:
        return self.row(self.baseline)

    @property
    def with_accounting(self) -> bool:
        """Whether some run's records carry accounting (else the comparison has no cost columns)."""
        return any(r.accounting is not None for r in self.rows)

    def context_change(self, row: RunRow) -> float | None:
        """`row`'s context tokens per task against the baseline's (-0.4: 40% fewer; see `relative_change`)."""
        return relative_change(row.context_tokens_per_task, self.baseline_row.context_tokens_per_task)


def relative_change(run: float | None, baseline: float | None) -> float | None:
    """run / baseline - 1; None when either is unknown or the baseline is 0 (no change can be a share of it)."""
    return None if run is None or not baseline else run / baseline - 1.0


@dataclass(frozen=True, slots=True)
class _ScoredRun:
    row: RunRow
    questions: dict[str, dict[str, float | None]]
    """Per scored question id: each metric averaged over its scored repeats (None when it has no value)."""


# ---------------------------------------------------------------- finding and reading runs

def find_runs(paths: Sequence[Path | str]) -> list[Path]:
    """Run folders named by `paths`: a folder with trajectory.jsonl is a run; any other folder
    stands for its subfolders that are runs (sorted by name), e.g. results/demo → its modes."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise NotARunFolderError(
                f"{path}: no such folder; pass run folders such as results/<experiment>/<mode>, or their parent"
            )
        if is_run_folder(path):
            runs = [path]
        else:
            runs = sorted((p for p in path.iterdir() if p.is_dir() and is_run_folder(p)), key=lambda p: p.name)
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


def _question_means(values: dict[str, list[float]]) -> dict[str, float | None]:
    return {m: float(np.mean(v)) if v else None for m, v in values.items()}


def _score_run(run_dir: Path, label: str, *, score_failed: bool = False,
               question_set: RunQuestionSet | None = None) -> _ScoredRun:
    seen: set[tuple[str, int]] = set()
    per_question: dict[str, dict[str, list[float]]] = {}
    extra = read_scores(run_dir)
    names = (*METRICS, *extra.metrics)
    metrics: dict[str, list[float]] = {m: [] for m in names}
    calibration = CalibrationTally(correctness_metric(names))
    calls: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    truncated = out_of_turns = out_of_context = 0
    latencies: list[float] = []
    tokens: list[float] = []
    accounting = AccountingTally()
    duplicates = repeats = 0
    for task in iter_trajectory(run_dir, keep=("messages",)):  # the final message states the confidence
        if task.key in seen:  # resume keeps one line per (id, repeat); a second one is stale, as there
            duplicates += 1
            continue
        seen.add(task.key)
        accounting.add(task)
        repeats = max(repeats, task.repeat + 1)
        s = score_task(task, score_failed=score_failed, extra=extra)
        statuses[task.status] += 1
        truncated += s["truncated"]
        out_of_turns += s["out_of_turns"]
        out_of_context += s["out_of_context"]
        if s["scored"]:
            question = per_question.setdefault(task.id, {m: [] for m in names})
            for key, values in metrics.items():
                if s[key] is not None:
                    values.append(s[key])
                    question[key].append(s[key])
            calibration.add(task_confidence(s, task.messages, task.prediction), s[calibration.correct_by])
        calls.update(c.name for c in task.tool_calls)
        latencies += [float(c.latency_ms) for c in task.tool_calls]
        if s["total_tokens"] is not None:
            tokens.append(float(s["total_tokens"]))
    if duplicates:
        logger.warning("%s: %d repeated (task id, repeat) records; kept the first line of each",
                       run_dir / TRAJECTORY_FILE, duplicates)
    n = len(seen)
    row = RunRow(
        label=label, mode=run_mode(run_dir), run_dir=run_dir, tasks=n, scored=len(metrics["exact_match"]),
        repeats=repeats, questions=len({qid for qid, _ in seen}), question_set=question_set,
        **{key: _mean(metrics[key]) for key in METRICS},
        extra={key: _mean(metrics[key]) for key in extra.metrics}, calibration=calibration.summary(),
        calls_per_task={t: round(c / n, 3) for t, c in sorted(calls.items())} if n else {},
        latency_p50_ms=_quantile(latencies, 0.5), latency_p95_ms=_quantile(latencies, 0.95),
        errors=statuses["error"], timeouts=statuses["timeout"], infra_errors=statuses["infra_error"],
        truncated=truncated, out_of_turns=out_of_turns, out_of_context=out_of_context, tokens_per_task=_mean(tokens),
        accounting=accounting.summary(),
    )
    return _ScoredRun(row, {q: _question_means(v) for q, v in per_question.items()})


def distinct_labels(runs: list[Path], root: Path | None = None) -> list[str]:
    """Each run's name in a comparison: its mode and telling overrides, and where two runs still share one, their
    folders under `root` (default: the folder holding them all)."""
    root = common_parent(runs) if root is None else root
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


def _metric_diff(metric: str, run: _ScoredRun, base: _ScoredRun, shared: list[str], *,
                 resamples: int, seed: int) -> MetricDiff:
    both = [q for q in shared if run.questions[q][metric] is not None and base.questions[q][metric] is not None]
    if not both:
        return MetricDiff(metric, 0, None, None, None, None, None)
    r = np.array([run.questions[q][metric] for q in both], dtype=np.float64)
    b = np.array([base.questions[q][metric] for q in both], dtype=np.float64)
    low, high = bootstrap_ci(r - b, resamples=resamples, seed=seed)
    return MetricDiff(metric, len(both), float(r.mean()), float(b.mean()), float((r - b).mean()), low, high)


def pair(run: _ScoredRun, base: _ScoredRun, *, resamples: int, seed: int) -> PairedComparison:
    shared = [q for q in base.questions if q in run.questions]  # baseline order: the same ids give the same resamples
    only_run = sum(q not in base.questions for q in run.questions)
    only_base = len(base.questions) - len(shared)
    both = [m for m in dict.fromkeys([*base.row.extra, *run.row.extra]) if base.row.has(m) and run.row.has(m)]
    diffs = {m: _metric_diff(m, run, base, shared, resamples=resamples, seed=seed) for m in (*METRICS, *both)}
    missing = {m: base.row.label for m in run.row.extra if m not in base.row.extra}
    missing |= {m: run.row.label for m in base.row.extra if m not in run.row.extra}
    right_run = np.array([run.questions[q]["exact_match"] > RIGHT_ABOVE for q in shared], dtype=bool)
    right_base = np.array([base.questions[q]["exact_match"] > RIGHT_ABOVE for q in shared], dtype=bool)
    return PairedComparison(
        label=run.row.label, baseline=base.row.label, shared=len(shared),
        only_in_run=only_run, only_in_baseline=only_base, metrics=diffs,
        wrong_to_right=int((~right_base & right_run).sum()), right_to_wrong=int((right_base & ~right_run).sum()),
        context_change=relative_change(run.row.context_tokens_per_task, base.row.context_tokens_per_task),
        missing=missing,
    )


def _pick_baseline(labels: list[str], modes: list[str], baseline: str | None) -> int:
    if baseline is None:
        return 0
    if baseline in labels:
        return labels.index(baseline)
    matches = [i for i, mode in enumerate(modes) if mode == baseline]
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(labels)
    if matches:
        raise ReportError(f"--baseline {baseline}: several runs have this mode; pass one of: {names}")
    raise ReportError(f"--baseline {baseline}: no run has this mode; the runs are: {names}")


def compare_runs(
    paths: Sequence[Path | str], *, baseline: str | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED, score_failed: bool = False,
    allow_different_questions: bool = False,
) -> Comparison:
    """Score the runs named by `paths` (run folders or their parents) and pair each with the
    baseline (`baseline` names a mode or label; default the first run). `score_failed` scores
    failed records as wrong answers instead of leaving them out. Runs of another question set than the
    baseline's are a `ReportError` unless `allow_different_questions`."""
    runs = find_runs(paths)
    labels = distinct_labels(runs)
    b = _pick_baseline(labels, [run_mode(run) for run in runs], baseline)
    check_one_question_set(runs, b, allow_different=allow_different_questions)  # before reading every trajectory
    scored = [_score_run(run, label, score_failed=score_failed, question_set=run_question_set(run))
              for run, label in zip(runs, labels, strict=True)]
    rows = [s.row for s in scored]
    pairs = [pair(s, scored[b], resamples=resamples, seed=seed) for i, s in enumerate(scored) if i != b]
    return Comparison(rows=rows, baseline=rows[b].label, pairs=pairs, seed=seed, resamples=resamples,
                      score_failed=score_failed)


# ---------------------------------------------------------------- tables and markdown
