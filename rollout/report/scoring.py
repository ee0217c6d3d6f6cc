"""Score a run's trajectory into evaluation_summary.json (printed by `rollout.report.printed`).

Which tasks enter the metrics: by default only tasks with status `ok`. Tasks that ended in
`error`, `timeout` or `infra_error` (a tool call failed for infrastructure reasons,
`rollout.wire.INFRA_OUTCOMES`) are counted under `statuses` and left out, so a broken gateway
lowers `scored`, never the EM. With `score_failed=True` they are scored as wrong answers instead:
EM, F1 and contains-answer 0, retrieval recall from whatever their tool calls returned.

An answer the model's endpoint cut at its token limit (`TaskResult.truncated`) keeps status `ok` and is
scored as it stands; `truncated` counts these records, all of them among the scored ones, so the
answers a model got wrong can be told from those it was cut off writing. Likewise `out_of_turns` counts the
records whose agent used all its turns without answering (`TaskResult.out_of_turns`: status ok, prediction ""), and
`out_of_context` those whose conversation outgrew the model's context window (`TaskResult.out_of_context`): the
agent's limits are its outcome, scored, never dropped as failures (an arm whose tools return longer text would
otherwise lose its hardest questions and look better than it is). A final message without the answer tag the agent
was to write (`TaskResult.no_answer_tag`, `agent.answer_tag`) is scored as the answer "", as the training reward
scores it 0, and the summary's warnings count those records.

Repeats: a run asks each question `repeats` times (records carry `repeat`, 0-based). The metrics
are the mean over every scored record. With more than one repeat the summary adds, per metric, a
95% CI over repeats (each repeat's mean, then their mean ± t(0.975, N-1) · sd / √N: Student's t,
since N is small and each repeat's mean is itself an average of many tasks; clipped to [0, 1] when the values
lie there, `metric_interval`, as the viewer's intervals are) and `pass_at_k` for
k = 1..N (Chen et al. 2021's unbiased estimator on exact match, per question then averaged over
the questions with at least k scored records).

Extra metrics: a run's scores files (`scores/*.jsonl`, `rollout.report.extra_scores`: its own scorers', a judge's)
add metrics after the built-in ones. They join `metrics`, `by_repeat`, `by_hops`, `by_style` and `ci95` alike, over
the scored records that have a value; an extra metric whose every value is 0 or 1 gets its pass@k too
(`pass_at_k_by_metric`). When answers state their confidence (`Confidence: 85%`), `calibration` says how well it
matches their correctness (`rollout.report.calibration`). A BrowseComp-Plus run (its questions carry
`evidence_doc_ids`, or its agent called `search` / `get_document`) gets its leaderboard's numbers in a block of their
own, `browsecomp_plus` (`rollout.report.browsecomp_leaderboard`).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, get_args

import numpy as np

from rollout.records import TaskResult, TaskStatus
from rollout.repetition import Repetition
from rollout.report.browsecomp_leaderboard import BrowseCompPlusTally, judge_of
from rollout.report.calibration import CalibrationTally, correctness_metric, task_confidence
from rollout.report.context_overflow import ContextOverflowTally
from rollout.report.costs import AccountingTally
from rollout.report.endpoint import EndpointTally
from rollout.report.extra_scores import ExtraScores
from rollout.report.metrics import contains_answer, exact_match, f1_score, pass_at_k, retrieval_recall
from rollout.report.running import CorrectPerQuestion, ExactSum, Grouped, Slice
from rollout.report.tool_calls.reach import ToolReachTally
from rollout.report.unfinished import UnfinishedCalls
from rollout.summary import (
    BUILTIN_METRICS,
    RepeatStats,
    RunSummary,
    ScoringSettings,
    TokenUse,
    ToolUse,
)

logger = logging.getLogger(__name__)

METRICS = BUILTIN_METRICS
"""The built-in metrics of `evaluation_summary.json` and of a comparison, in display order; a run's extra metrics
follow them."""
ANSWER_METRICS = METRICS[:3]
"""Metrics of the final answer: 0 for a failed task that is scored."""
METRIC_NAMES = {"exact_match": "EM", "f1": "F1", "contains_answer": "contains", "retrieval_recall": "recall"}
"""Short names of `METRICS` in tables and sentences; an extra metric shows under its own name (`metric_label`)."""
STATUSES: tuple[str, ...] = get_args(TaskStatus)
"""Every task status, in the order `statuses` lists them."""
FAILED_STATUSES = tuple(s for s in STATUSES if s != "ok")
"""Task statuses left out of the metrics unless `score_failed`."""
CI_LEVEL = 0.95
"""Level of the CI over repeats."""


def metric_label(metric: str) -> str:
    """A metric's name in tables and sentences: the short name of a built-in one, else its own."""
    return METRIC_NAMES.get(metric, metric)


def is_scored(status: str, *, score_failed: bool = False) -> bool:
    """Whether a task with this status enters the metrics."""
    return status == "ok" or score_failed


def score_task(r: TaskResult, *, score_failed: bool = False, extra: ExtraScores | None = None) -> dict[str, Any]:
    """One task's metrics and tool usage, then its `extra` metrics. The metrics are None when the task is not
    scored (it failed and `score_failed` is off); a failed task that is scored gets 0 for its answer."""
    scored = is_scored(r.status, score_failed=score_failed)
    answered = r.status == "ok"
    # Gold ids may name passages or, for chunked corpora, their source documents.
    retrieved = [i for c in r.tool_calls for i in (*c.result_ids, *c.result_doc_ids)]
    return {
        "id": r.id,
        "repeat": r.repeat,
        "status": r.status,
        "scored": scored,
        "exact_match": (exact_match(r.prediction, r.golden_answers) if answered else 0.0) if scored else None,
        "f1": (f1_score(r.prediction, r.golden_answers) if answered else 0.0) if scored else None,
        "contains_answer": (contains_answer(r.prediction, r.golden_answers) if answered else 0.0) if scored else None,
        "retrieval_recall": retrieval_recall(retrieved, r.metadata.get("gold_doc_ids", [])) if scored else None,
        "tool_calls": len(r.tool_calls),
        "error": r.status == "error",
        "timeout": r.status == "timeout",
        "infra_error": r.status == "infra_error",
        "truncated": r.truncated,
        "out_of_turns": r.out_of_turns,
        "out_of_context": r.out_of_context,
        "no_answer_tag": r.no_answer_tag,
        "unreadable_call": r.unreadable_call,
        "total_tokens": r.usage.get("total_tokens"),
        "cost_usd": r.usage.get("cost_usd"),
        "hops": r.metadata.get("hops"),
        "style": r.metadata.get("style"),
    } | ({} if extra is None else {m: v if scored else None for m, v in extra.of(r.key).items()})


def t_interval(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Student-t CI of the mean of `values` (None with fewer than two)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    # scipy comes with sentence-transformers; scipy.special's quantile of Student's t (t.ppf's own) imports in a
    # third of scipy.stats' time, which the viewer's first page would wait for
    from scipy.special import stdtrit

    half = float(stdtrit(len(x) - 1, 0.5 + level / 2)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return float(x.mean()) - half, float(x.mean()) + half


def metric_interval(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """`t_interval` of a metric's values, clipped to [0, 1] when every value lies there (the built-in metrics always
    do): a t-interval over few or skewed values overshoots the range no mean can leave. The one rule of the
    evaluation summary and the viewer."""
    interval = t_interval(values, level)
    if interval is None or not all(0.0 <= v <= 1.0 for v in values):
        return interval
    return max(interval[0], 0.0), min(interval[1], 1.0)


class _Tally:
    """Everything the summary needs, added record by record (see `rollout.report.running`)."""

    def __init__(self, score_failed: bool, extra: ExtraScores, unfinished: UnfinishedCalls | None = None) -> None:
        self.score_failed = score_failed
        self.extra = extra
        self.metrics = (*METRICS, *extra.metrics)
        self.n = 0
        self.statuses: Counter[str] = Counter()
        self.truncated = 0
        self.out_of_turns = 0
        self.out_of_context = 0
        self.no_answer_tag = 0
        self.unreadable_call = 0
        self.overflows = ContextOverflowTally()
        self.max_repeat = -1
        self.calls: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.call_count = 0
        self.scored = Slice(self.metrics)
        self.by_repeat: dict[int, Slice] = {}
        self.by = {key: Grouped(self.metrics) for key in ("hops", "style")}
        self.right = CorrectPerQuestion()
        self.right_by = {m: CorrectPerQuestion() for m in extra.metrics}
        """Per extra metric, for its pass@k: dropped once a value other than 0 or 1 is met."""
        self.calibration = CalibrationTally(correctness_metric(self.metrics))
        self.browsecomp = BrowseCompPlusTally(judge_of(extra))
        self.tokens = ExactSum()
        self.cost = ExactSum()
        self.accounting = AccountingTally()
        self.tool_reach = ToolReachTally()
        self.repetition = Repetition()
        self.endpoint = EndpointTally()
        self.unfinished = unfinished

    def add(self, r: TaskResult) -> None:
        row = score_task(r, score_failed=self.score_failed, extra=self.extra)
        self.n += 1
        self.accounting.add(r)
        self.tool_reach.add(r)
        self.repetition.add(r)
        self.endpoint.add(r)
        if self.unfinished is not None:
            self.unfinished.finished(r)
        self.statuses[r.status] += 1
        self.truncated += row["truncated"]
        self.out_of_turns += row["out_of_turns"]
        self.out_of_context += row["out_of_context"]
        self.no_answer_tag += row["no_answer_tag"]
        self.unreadable_call += row["unreadable_call"]
        self.overflows.add(r)
        self.max_repeat = max(self.max_repeat, r.repeat)
        self.calls.update(c.name for c in r.tool_calls)
        self.failed.update(c.name for c in r.tool_calls if not c.ok)
        self.call_count += row["tool_calls"]
        if row["total_tokens"] is not None:
            self.tokens.add(row["total_tokens"])
        if row["cost_usd"] is not None:
            self.cost.add(row["cost_usd"])
        for key, grouped in self.by.items():
            grouped.see(row[key])
        self.browsecomp.add(r, row, counted=row["scored"])
        if not row["scored"]:
            return
        self.scored.add(row)
        if (repeat := self.by_repeat.get(r.repeat)) is None:
            repeat = self.by_repeat[r.repeat] = Slice(self.metrics)
        repeat.add(row)
        for key, grouped in self.by.items():
            grouped.add(row[key], row)
        self.right.add(r.id, row["exact_match"])
        for m in list(self.right_by):
            if row[m] not in (None, 0.0, 1.0):
                del self.right_by[m]
            elif row[m] is not None:
                self.right_by[m].add(r.id, row[m])
        self.calibration.add(task_confidence(row, r.messages, r.prediction), row[self.calibration.correct_by])

    def repeat_stats(self, repeats: int) -> RepeatStats:
        """by_repeat, ci95 and pass_at_k of a run with `repeats` > 1."""
        by_repeat = {str(k): self.by_repeat[k].scores() for k in sorted(self.by_repeat)}
        # Unrounded per-repeat means feed the interval.
        repeat_means = [self.by_repeat[k].means() for k in sorted(self.by_repeat)]
        ci: dict[str, tuple[float, float] | None] = {}
        for m in self.metrics:
            interval = metric_interval([means[m] for means in repeat_means if means[m] is not None])
            ci[m] = None if interval is None else (round(interval[0], 4), round(interval[1], 4))
        return RepeatStats(by_repeat=by_repeat, ci95=ci, pass_at_k=_pass_at_k(self.right, repeats),
                           pass_at_k_by_metric={m: _pass_at_k(right, repeats) for m, right in self.right_by.items()})


def _pass_at_k(right: CorrectPerQuestion, repeats: int) -> dict[str, float | None]:
    """pass@k for k = 1..repeats, averaged over the questions with at least k records."""
    per_question = right.tries_and_right()
    at_k: dict[str, float | None] = {}
    for k in range(1, repeats + 1):
        eligible = [(pass_at_k(n, c, k), count) for (n, c), count in per_question.items() if n >= k]
        questions = sum(count for _, count in eligible)
        at_k[str(k)] = round(math.fsum(v * count for v, count in eligible) / questions, 4) if questions else None
    return at_k


def summarize(
    results: Iterable[TaskResult], *, mode: str, gateway_file: str, wall_time_s: float, complete: bool = True,
    score_failed: bool = False, deterministic_agent: bool | None = None, degraded_tools: dict[str, str] | None = None,
    extra: ExtraScores | None = None, scorers: Sequence[str] = (), tools_offered: int | None = None,
    max_turns: int | None = None, unfinished: UnfinishedCalls | None = None,
) -> RunSummary:
    """The evaluation summary (one pass over `results`, nothing kept per record but 9 bytes for pass@k, 5 per answer
    stating a confidence (calibration) and per judged BrowseComp-Plus answer, and 32 per timed LLM request):
    overall metrics, breakdowns by hops and style, task statuses, tool usage, tokens, where the tasks'
    time and tokens went (`rollout.report.costs`, over every record); with several repeats, CIs
    over repeats and pass@k.

    `score_failed` scores failed tasks as wrong answers instead of leaving them out;
    `deterministic_agent`, `degraded_tools` (name → reason, as the gateway listed the tools) and `tools_offered` (how
    many) are copied as is: the caller knows whether the agent samples, and which tools it was offered; `max_turns` is
    the agent's `agent.max_turns` (None when not known), which tells a run that left no turn for tools. `extra` holds
    the run's scores files (`read_scores`), `scorers` the run's own scorers as configured (recorded in `scoring`).
    `unfinished` holds an interrupted run's ledger calls (`rollout.report.unfinished`): those of the tasks no record
    holds are the summary's `unfinished_calls`.

    Calibration reads each record's messages: records read without them (`iter_trajectory` drops them unless
    kept) are calibrated from their prediction alone."""
    extra = extra or ExtraScores()
    tally = _Tally(score_failed, extra, unfinished)
    for r in results:
        tally.add(r)
    repeats = tally.max_repeat + 1
    tokens = None
    if tally.tokens.count:
        cost = round(tally.cost.total(), 6) if tally.cost.count else None
        mean = tally.tokens.mean()
        assert mean is not None
        tokens = TokenUse(int(tally.tokens.total()), round(mean, 1), cost)
    return RunSummary(
        n=tally.n,
        scored=tally.scored.n,
        metrics=tally.scored.metrics(),
        mode=mode,
        gateway_file=gateway_file,
        complete=complete,
        score_failed=score_failed,
        statuses={s: tally.statuses.get(s, 0) for s in STATUSES} | {
            s: n for s, n in tally.statuses.items() if s not in STATUSES
        },
        truncated=tally.truncated,
        out_of_turns=tally.out_of_turns,
        out_of_context=tally.out_of_context,
        repeats=repeats,
        deterministic_agent=deterministic_agent,
        tool_calls={name: ToolUse(n, tally.failed.get(name, 0)) for name, n in sorted(tally.calls.items())},
        tool_calls_per_task=round(tally.call_count / tally.n, 3) if tally.n else 0.0,
        wall_time_s=round(wall_time_s, 2),
        repeat_stats=tally.repeat_stats(repeats) if repeats > 1 and tally.scored.n else None,
        tokens=tokens,
        by_hops=tally.by["hops"].groups(),
        by_style=tally.by["style"].groups(),
        accounting=tally.accounting.summary(),
        degraded_tools=dict(degraded_tools or {}),
        tools_offered=tools_offered,
        warnings=_warnings(tally, tools_offered, max_turns, deterministic_agent),
        calibration=tally.calibration.summary(),
        browsecomp_plus=tally.browsecomp.summary(),
        scoring=ScoringSettings(scorers=list(scorers), score_files=list(extra.files),
                                extra_metrics={m: extra.sources[m] for m in extra.metrics}),
        llm_endpoint=tally.endpoint.summary(),
        unfinished_calls={} if unfinished is None else unfinished.tools(),
        repeated_calls=tally.repetition,
    )


def _warnings(tally: _Tally, tools_offered: int | None, max_turns: int | None,
              deterministic_agent: bool | None = None) -> list[str]:
    """The summary's warnings: what makes its numbers mean less than they seem, each with its fix."""
    warnings = []
    if (overflowed := tally.overflows.warning(tally.n)) is not None:
        warnings.append(overflowed)
    if tally.no_answer_tag:
        warnings.append(f"{tally.no_answer_tag} of {tally.n} tasks ended with no complete answer tag in the final "
                        "message (agent.answer_tag) and are scored as the answer \"\", as the training reward scores "
                        "them 0: read one with `rollout view RUN --wrong`; the model may not follow the system "
                        "prompt's request for the tag")
    if tally.unreadable_call:
        warnings.append(f"{tally.unreadable_call} of {tally.n} tasks ended on a tool call the model wrote that its "
                        "server could not read (the server sent an error in place of the reply; its words are each "
                        "task's stop_message): scored as the answer \"\", as what the model wrote. Read one with "
                        "`rollout view RUN --wrong`")
    if (unseen := tally.tool_reach.warning()) is not None:
        warnings.append(unseen)
    if (looping := tally.repetition.warning(deterministic_agent)) is not None:
        warnings.append(looping)
    if tools_offered and tally.n and not tally.call_count and max_turns == 1:
        # The agent's one turn is its answering turn (agent=openai sends it with tool_choice "none"): rollout withheld
        # the tools, whatever the server would have done with them.
        warnings.append(f"the run offered {tools_offered} tools and no task made a single tool call: agent.max_turns=1 "
                        "leaves the agent no turn for tools (its one turn is the answering turn), so every answer is "
                        "closed-book; set agent.max_turns=2 or more to let it search")
    elif tools_offered and tally.n and not tally.call_count:
        warnings.append(f"the run offered {tools_offered} tools and no task made a single tool call: the LLM server "
                        "may not pass the tools to the model (llama.cpp's server needs --jinja; vLLM "
                        "--enable-auto-tool-choice --tool-call-parser NAME), or the model does not call them; "
                        "read one task's conversation with `rollout view RUN --task ID`")
    return warnings


