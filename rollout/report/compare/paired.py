"""The paired view of `rollout.report.compare.comparison`: one run against the baseline, question by question.

The unit is the question: the ids both runs scored, each question's value being the mean of its scored repeats
(`rollout.report.compare.run_row.ScoredRun`). Every metric's difference (run - baseline) gets a percentile bootstrap CI
from `BOOTSTRAP_RESAMPLES` resamples of those questions, seeded so the same runs always give the same interval; a
flip is a question right in one run and wrong in the other (repeat-averaged EM above `RIGHT_ABOVE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rollout.report.compare.run_row import ScoredRun
from rollout.report.scoring import CI_LEVEL, METRICS

BOOTSTRAP_RESAMPLES = 10_000
DEFAULT_SEED = 0
_RESAMPLE_CELLS = 4_000_000
"""Indices drawn per bootstrap batch: bounds memory (~32 MB) whatever the number of tasks."""
RIGHT_ABOVE = 0.5
"""A question is right (for flips) when its EM averaged over its repeats is above this."""


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


def relative_change(run: float | None, baseline: float | None) -> float | None:
    """run / baseline - 1; None when either is unknown or the baseline is 0 (no change can be a share of it)."""
    return None if run is None or not baseline else run / baseline - 1.0


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


def _metric_diff(metric: str, run: ScoredRun, base: ScoredRun, shared: list[str], *,
                 resamples: int, seed: int) -> MetricDiff:
    both = [q for q in shared if run.questions[q][metric] is not None and base.questions[q][metric] is not None]
    if not both:
        return MetricDiff(metric, 0, None, None, None, None, None)
    r = np.array([run.questions[q][metric] for q in both], dtype=np.float64)
    b = np.array([base.questions[q][metric] for q in both], dtype=np.float64)
    low, high = bootstrap_ci(r - b, resamples=resamples, seed=seed)
    return MetricDiff(metric, len(both), float(r.mean()), float(b.mean()), float((r - b).mean()), low, high)


def pair(run: ScoredRun, base: ScoredRun, *, resamples: int, seed: int) -> PairedComparison:
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
