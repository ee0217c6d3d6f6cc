"""Compare run folders: one row of metrics per mode, and each mode paired against a baseline.

Every number is rebuilt from `trajectory.jsonl`, streamed one task at a time and scored with
`rollout.report.scoring.score_task`, so a comparison agrees with each run's own evaluation summary.

`compare_runs` finds and names the runs (`rollout.report.compare.run_folders`), scores each into its row
(`rollout.report.compare.run_row`), pairs each with the baseline (`rollout.report.compare.paired`) and returns the `Comparison`
that `rollout.report.compare.tables` prints and writes.

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
  quantiles use numpy's default linear interpolation, like `rollout.report.tool_calls.report`.
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
- BrowseComp-Plus' leaderboard numbers (`rollout.report.browsecomp_leaderboard`) are each run's own, over its scored
  records, side by side in a table of their own for the runs that have them; they are not paired.
- A run's question set is named from its config.yaml and known by the hash in its fingerprint.json
  (`rollout.report.compare.question_set`): runs of different sets are refused unless `allow_different_questions`; a run's
  `questions` are the distinct question ids it asked.
- A flip is a question right in one run and wrong in the other, "right" meaning a repeat-averaged
  EM above 0.5 (right in most of its repeats; with one repeat, simply right).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout.errors import ReportError
from rollout.report.compare.paired import BOOTSTRAP_RESAMPLES, DEFAULT_SEED, PairedComparison, pair, relative_change
from rollout.report.compare.question_set import (
    RunQuestionSet,
    check_one_question_set,
    question_set_line,
    run_question_set,
    shared_question_set,
)
from rollout.report.compare.run_folders import distinct_labels, find_runs
from rollout.report.compare.run_row import RunRow, score_run
from rollout.report.scoring import METRICS
from rollout.report.tool_calls.ledger import run_mode


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
    scored = [score_run(run, label, score_failed=score_failed, question_set=run_question_set(run))
              for run, label in zip(runs, labels, strict=True)]
    rows = [s.row for s in scored]
    pairs = [pair(s, scored[b], resamples=resamples, seed=seed) for i, s in enumerate(scored) if i != b]
    return Comparison(rows=rows, baseline=rows[b].label, pairs=pairs, seed=seed, resamples=resamples,
                      score_failed=score_failed)
