"""The pandas implementation `summarize` had before it streamed: one DataFrame row per record.

Kept as the oracle the streaming summary must agree with to the byte (tests/report/test_scoring_stream.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from rollout.records import TaskResult
from rollout.report.metrics import pass_at_k
from rollout.report.scoring import METRICS, STATUSES, score_task, t_interval
from rollout.summary import GroupScores, Metrics, RepeatStats, RunSummary, TokenUse, ToolUse


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
