"""One run folder scored for `rollout.report.compare.comparison`: its row of the comparison table and its per-question means.

`score_run` streams the run's `trajectory.jsonl` one task at a time and scores each with
`rollout.report.scoring.score_task`, as the run's own evaluation summary does; `RunRow` is what the per-mode table
shows, `ScoredRun` adds each scored question's repeat-averaged metrics, which `rollout.report.compare.paired` pairs. What
each number means is in `rollout.report.compare.comparison`'s definitions.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rollout.accounting import RunAccounting
from rollout.benchmark_scores import BrowseCompPlusScores, Calibration
from rollout.repetition import Repetition
from rollout.report.browsecomp_leaderboard import BrowseCompPlusTally, judge_of
from rollout.report.calibration import CalibrationTally, correctness_metric, task_confidence
from rollout.report.compare.question_set import RunQuestionSet
from rollout.report.costs import AccountingTally
from rollout.report.extra_scores import read_scores
from rollout.report.scoring import METRICS, score_task
from rollout.report.tool_calls.ledger import run_mode
from rollout.run_folder import TRAJECTORY_FILE, iter_trajectory

logger = logging.getLogger(__name__)


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
    browsecomp_plus: BrowseCompPlusScores | None = None
    """BrowseComp-Plus' leaderboard numbers of the run (None for a run that is not BrowseComp-Plus')."""
    repeated_calls: int = 0
    """Tool calls repeating an earlier call of their task (`rollout.repetition`), over every record."""
    repeated_call_share: float | None = None
    """Of all the run's tool calls (None without calls)."""
    repeated_turns: int = 0
    """Turns the same as the turn before in their task."""
    looping_tasks: int = 0
    """Records with a repeated call or turn."""

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
class ScoredRun:
    """A run's row and the per-question means that pairing reads."""

    row: RunRow
    questions: dict[str, dict[str, float | None]]
    """Per scored question id: each metric averaged over its scored repeats (None when it has no value)."""


def _quantile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), 100 * q)), 3) if values else None


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(np.asarray(values, dtype=np.float64))), 4) if values else None


def _question_means(values: dict[str, list[float]]) -> dict[str, float | None]:
    return {m: float(np.mean(v)) if v else None for m, v in values.items()}


def score_run(run_dir: Path, label: str, *, score_failed: bool = False,
               question_set: RunQuestionSet | None = None) -> ScoredRun:
    seen: set[tuple[str, int]] = set()
    per_question: dict[str, dict[str, list[float]]] = {}
    extra = read_scores(run_dir)
    names = (*METRICS, *extra.metrics)
    metrics: dict[str, list[float]] = {m: [] for m in names}
    calibration = CalibrationTally(correctness_metric(names))
    browsecomp = BrowseCompPlusTally(judge_of(extra))
    calls: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    truncated = out_of_turns = out_of_context = 0
    latencies: list[float] = []
    tokens: list[float] = []
    accounting = AccountingTally()
    repetition = Repetition()
    duplicates = repeats = 0
    # The final message states the confidence; the events are the turns, compared for repeats.
    for task in iter_trajectory(run_dir, keep=("messages", "events")):
        if task.key in seen:  # resume keeps one line per (id, repeat); a second one is stale, as there
            duplicates += 1
            continue
        seen.add(task.key)
        accounting.add(task)
        repetition.add(task)
        repeats = max(repeats, task.repeat + 1)
        s = score_task(task, score_failed=score_failed, extra=extra)
        browsecomp.add(task, s, counted=s["scored"])
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
        accounting=accounting.summary(), browsecomp_plus=browsecomp.summary(),
        repeated_calls=repetition.count, repeated_call_share=repetition.share,
        repeated_turns=repetition.repeated_turns, looping_tasks=repetition.looping_tasks,
    )
    return ScoredRun(row, {q: _question_means(v) for q, v in per_question.items()})
