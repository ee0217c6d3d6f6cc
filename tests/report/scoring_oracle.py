"""The pandas implementation `summarize` had before it streamed: one DataFrame row per record.

Kept as the oracle the streaming summary must agree with to the byte (tests/report/test_scoring_stream.py). Its
arithmetic is its own, written from the definitions and not imported from the code it checks: a task's scores
(SQuAD's answer normalisation, exact match, token F1, contains-answer, retrieval recall), the Student-t interval
(`scipy.stats.t`) and pass@k (the binomial ratio with `math.comb`). Only names (the metrics, the statuses) and the
summary's record types come from `rollout`.
"""

from __future__ import annotations

import math
import re
import statistics
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rollout.records import TaskResult
from rollout.report.scoring import CI_LEVEL, METRICS, STATUSES
from rollout.summary import GroupScores, Metrics, RepeatStats, RunSummary, TokenUse, ToolUse

_PUNCTUATION = frozenset(string.punctuation)


def _normalize(text: str) -> str:
    """SQuAD v1.1's `normalize_answer`: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _exact(prediction: str, golden: Sequence[str]) -> float:
    return 1.0 if _normalize(prediction) in {_normalize(g) for g in golden} else 0.0


def _token_f1(prediction: str, golden: Sequence[str]) -> float:
    best = 0.0
    for gold in golden:
        pred, ref = _normalize(prediction).split(), _normalize(gold).split()
        overlap = sum((Counter(pred) & Counter(ref)).values())
        if overlap:
            best = max(best, 2 * overlap / (len(pred) + len(ref)))  # the harmonic mean of precision and recall
    return best


def _contains(prediction: str, golden: Sequence[str]) -> float:
    words = _normalize(prediction).split()
    for gold in filter(None, map(_normalize, golden)):
        span = gold.split()
        if any(words[i:i + len(span)] == span for i in range(len(words) - len(span) + 1)):
            return 1.0
    return 0.0


def _recall(r: TaskResult) -> float | None:
    gold = set(r.metadata.get("gold_doc_ids", []))
    if not gold:
        return None
    seen = {i for c in r.tool_calls for i in [*c.result_ids, *c.result_doc_ids]}
    return len(gold & seen) / len(gold)


def score_task(r: TaskResult, *, score_failed: bool = False) -> dict[str, Any]:
    """One row: a task's four metrics (None when not scored; 0 for the answer of a scored failed task) and counts."""
    scored = r.status == "ok" or score_failed
    answer = {"exact_match": _exact, "f1": _token_f1, "contains_answer": _contains}
    row: dict[str, Any] = {"id": r.id, "repeat": r.repeat, "status": r.status, "scored": scored}
    for name, metric in answer.items():
        row[name] = None if not scored else metric(r.prediction, r.golden_answers) if r.status == "ok" else 0.0
    row["retrieval_recall"] = _recall(r) if scored else None
    row |= {"tool_calls": len(r.tool_calls), "truncated": r.truncated, "out_of_turns": r.out_of_turns,
            "out_of_context": r.out_of_context, "total_tokens": r.usage.get("total_tokens"),
            "cost_usd": r.usage.get("cost_usd"), "hops": r.metadata.get("hops"), "style": r.metadata.get("style")}
    return row


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The Student-t interval of the mean at `CI_LEVEL` (None with fewer than two values)."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = stats.t.ppf(0.5 + CI_LEVEL / 2, df=len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of n samples hold one of the c correct ones."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _means(df: pd.DataFrame) -> Metrics:
    out: Metrics = {}
    for m in METRICS:
        col = pd.to_numeric(df[m], errors="coerce").dropna() if m in df else pd.Series(dtype=float)
        out[m] = round(float(col.mean()), 4) if len(col) else None
    return out


def _groups(rows: pd.DataFrame, by: pd.Series) -> dict[str, GroupScores]:
    return {str(k): GroupScores(len(g), _means(g)) for k, g in rows.groupby(by, sort=True)}


def _repeat_stats(scored: pd.DataFrame, repeats: int) -> RepeatStats:
    """by_repeat, ci95 and pass_at_k of the scored rows of a run with `repeats` > 1."""
    by_repeat = {str(int(k)): GroupScores(len(g), _means(g)) for k, g in scored.groupby("repeat", sort=True)}
    # Unrounded per-repeat means feed the interval.
    repeat_means = scored.groupby("repeat")[list(METRICS)].agg(lambda col: pd.to_numeric(col, errors="coerce").mean())
    ci: dict[str, tuple[float, float] | None] = {}
    for m in METRICS:
        interval = t_interval(repeat_means[m].dropna().tolist())
        # Every metric lies in [0, 1]: so does its interval (a t-interval over few repeats can overshoot).
        ci[m] = None if interval is None else (round(max(interval[0], 0.0), 4), round(min(interval[1], 1.0), 4))
    per_question = scored.groupby("id")["exact_match"].agg(["size", lambda em: int((em == 1.0).sum())])
    per_question.columns = ["n", "c"]
    at_k: dict[str, float | None] = {}
    for k in range(1, repeats + 1):
        values = [pass_at_k(int(n), int(c), k) for n, c in zip(per_question["n"], per_question["c"]) if n >= k]
        at_k[str(k)] = round(float(np.mean(values)), 4) if values else None
    return RepeatStats(by_repeat=by_repeat, ci95=ci, pass_at_k=at_k)


def summarize(
    results: Iterable[TaskResult], *, mode: str, gateway_file: str, wall_time_s: float, complete: bool = True,
    score_failed: bool = False, deterministic_agent: bool | None = None,
) -> RunSummary:
    """The evaluation summary (one pass over `results`): overall metrics, breakdowns by hops and
    style, task statuses, tool usage, tokens; with several repeats, CIs over repeats and pass@k.

    `score_failed` scores failed tasks as wrong answers instead of leaving them out;
    `deterministic_agent` is copied as is (the caller knows whether the agent samples)."""
    rows: list[dict[str, Any]] = []
    calls: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for r in results:
        rows.append(score_task(r, score_failed=score_failed))
        calls.update(c.name for c in r.tool_calls)
        failed.update(c.name for c in r.tool_calls if not c.ok)
    df = pd.DataFrame(rows)
    statuses = Counter(df["status"]) if len(df) else Counter()
    scored = df[df["scored"]] if len(df) else df
    repeats = int(df["repeat"].max()) + 1 if len(df) else 0
    tokens = None
    if len(df) and df["total_tokens"].notna().any():
        cost = round(float(df["cost_usd"].sum()), 6) if df["cost_usd"].notna().any() else None
        tokens = TokenUse(int(df["total_tokens"].sum()), round(float(df["total_tokens"].mean()), 1), cost)
    by = {key: _groups(scored, scored[key].astype(str)) if len(scored) and scored[key].notna().any() else None
          for key in ("hops", "style")}
    return RunSummary(
        n=len(df),
        scored=len(scored),
        metrics=_means(scored) if len(scored) else dict.fromkeys(METRICS),
        mode=mode,
        gateway_file=gateway_file,
        complete=complete,
        score_failed=score_failed,
        statuses={s: int(statuses.get(s, 0)) for s in STATUSES} | {
            str(s): int(n) for s, n in statuses.items() if s not in STATUSES
        },
        truncated=int(df["truncated"].sum()) if len(df) else 0,
        out_of_turns=int(df["out_of_turns"].sum()) if len(df) else 0,
        out_of_context=int(df["out_of_context"].sum()) if len(df) else 0,
        repeats=repeats,
        deterministic_agent=deterministic_agent,
        tool_calls={name: ToolUse(n, failed.get(name, 0)) for name, n in sorted(calls.items())},
        tool_calls_per_task=round(float(df["tool_calls"].mean()), 3) if len(df) else 0.0,
        wall_time_s=round(wall_time_s, 2),
        repeat_stats=_repeat_stats(scored, repeats) if repeats > 1 and len(scored) else None,
        tokens=tokens,
        by_hops=by["hops"],
        by_style=by["style"],
    )
