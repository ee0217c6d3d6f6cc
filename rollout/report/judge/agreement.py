"""Exact match against the judge, task by task: a 2x2 table and the tasks on which they disagree.

Before trusting a judge, read the tasks it and exact match see differently: "EM right, judge wrong" is usually a
judge that is too strict (or a gold answer matched by luck), "judge right, EM wrong" a sentence-long answer that
holds the gold one, or a lenient judge. Only answered tasks (status ok) with a verdict enter the table; replies that
could not be parsed and failed requests are counted apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rollout.records import TaskKey, TaskResult
from rollout.report.judge.grader import JudgeRecord
from rollout.report.judge.presets import JUDGE_CORRECT
from rollout.report.metrics import exact_match


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One task exact match and the judge score differently."""

    id: str
    repeat: int
    prediction: str
    golden_answers: list[str]
    label: str | None
    """The judge's grade as its preset names it."""


@dataclass(slots=True)
class Agreement:
    """Exact match (rows) by judge (columns) over the judged answers of one run."""

    both_right: int = 0
    em_only: list[Disagreement] = field(default_factory=list)
    """EM right, judge wrong."""
    judge_only: list[Disagreement] = field(default_factory=list)
    """Judge right, EM wrong."""
    both_wrong: int = 0
    no_verdict: int = 0
    """Answered tasks whose reply could not be parsed or whose request failed."""

    @property
    def judged(self) -> int:
        return self.both_right + len(self.em_only) + len(self.judge_only) + self.both_wrong

    @property
    def rate(self) -> float | None:
        """Share of judged answers on which exact match and the judge agree."""
        return (self.both_right + self.both_wrong) / self.judged if self.judged else None


def agreement(tasks: Iterable[TaskResult], verdicts: Mapping[TaskKey, JudgeRecord]) -> Agreement:
    table = Agreement()
    for task in tasks:
        record = verdicts.get(task.key)
        if task.status != "ok" or record is None:
            continue
        judged = record.metrics.get(JUDGE_CORRECT)
        if judged is None:
            table.no_verdict += 1
            continue
        em, judge = exact_match(task.prediction, task.golden_answers) == 1.0, judged == 1.0
        if em and judge:
            table.both_right += 1
        elif not em and not judge:
            table.both_wrong += 1
        else:
            cell = table.em_only if em else table.judge_only
            cell.append(Disagreement(task.id, task.repeat, task.prediction, list(task.golden_answers), record.label))
    return table
