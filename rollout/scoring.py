"""Score a run's trajectory into evaluation_summary.json and print the summary table."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from rollout.metrics import contains_answer, exact_match, f1_score, retrieval_recall
from rollout.records import TaskResult

logger = logging.getLogger(__name__)

def score_task(r: TaskResult) -> dict[str, Any]:
    """One task's metrics and tool usage."""
    # Gold ids may name passages or, for chunked corpora, their source documents.
    retrieved = [i for c in r.tool_calls for i in (*c.get("result_ids", []), *c.get("result_doc_ids", []))]
    return {
        "id": r.id,
        "exact_match": exact_match(r.prediction, r.golden_answers),
        "f1": f1_score(r.prediction, r.golden_answers),
        "contains_answer": contains_answer(r.prediction, r.golden_answers),
        "retrieval_recall": retrieval_recall(retrieved, r.metadata.get("gold_doc_ids", [])),
        "tool_calls": len(r.tool_calls),
        "error": r.error is not None and r.status != "timeout",  # timeouts are counted on their own
        "timeout": r.status == "timeout",
        "total_tokens": r.usage.get("total_tokens"),
        "cost_usd": r.usage.get("cost_usd"),
        "hops": r.metadata.get("hops"),
        "style": r.metadata.get("style"),
    }


def _means(df: pd.DataFrame) -> dict[str, float | None]:
    out = {}
    for m in ("exact_match", "f1", "contains_answer", "retrieval_recall"):
        col = df[m].dropna() if m in df else pd.Series(dtype=float)
        out[m] = round(float(col.mean()), 4) if len(col) else None
    return out


def summarize(
    results: Iterable[TaskResult], *, mode: str, gateway_file: str, wall_time_s: float, complete: bool = True
) -> dict[str, Any]:
    """The evaluation summary (one pass over `results`): overall metrics, breakdowns by hops and
    style, tool usage, errors, tokens."""
    rows: list[dict[str, Any]] = []
    calls: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for r in results:
        rows.append(score_task(r))
        calls.update(c["name"] for c in r.tool_calls)
        failed.update(c["name"] for c in r.tool_calls if not c.get("ok"))
    df = pd.DataFrame(rows)
    summary: dict[str, Any] = {
        "n": len(df),
        "metrics": _means(df) if len(df) else dict.fromkeys(("exact_match", "f1", "contains_answer", "retrieval_recall")),
        "mode": mode,
        "gateway_file": gateway_file,
        "complete": complete,
        "errors": int(df["error"].sum()) if len(df) else 0,
        "timeouts": int(df["timeout"].sum()) if len(df) else 0,
        "tool_calls": {name: {"calls": n, "failed": failed.get(name, 0)} for name, n in sorted(calls.items())},
        "tool_calls_per_task": round(float(df["tool_calls"].mean()), 3) if len(df) else 0.0,
        "wall_time_s": round(wall_time_s, 2),
    }
    if len(df) and df["total_tokens"].notna().any():
        summary["tokens"] = {"total": int(df["total_tokens"].sum()), "per_task": round(float(df["total_tokens"].mean()), 1)}
        if df["cost_usd"].notna().any():
            summary["tokens"]["cost_usd"] = round(float(df["cost_usd"].sum()), 6)
    for key in ("hops", "style"):
        if len(df) and df[key].notna().any():
            summary[f"by_{key}"] = {
                str(k): {"n": len(g), **_means(g)} for k, g in df.groupby(df[key].astype(str), sort=True)
            }
    return summary


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_summary(summary: dict[str, Any], out_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    m = summary["metrics"]
    partial = "" if summary.get("complete", True) else " (interrupted)"
    table = Table(title=f"rollout · mode={summary['mode']} · {summary['n']} tasks{partial}", title_justify="left")
    for col in ("EM", "F1", "contains", "recall", "errors", "timeouts", "time (s)"):
        table.add_column(col, justify="right")
    table.add_row(
        _fmt(m["exact_match"]), _fmt(m["f1"]), _fmt(m["contains_answer"]), _fmt(m["retrieval_recall"]),
        str(summary["errors"]), str(summary.get("timeouts", 0)), f"{summary['wall_time_s']:.1f}",
    )
    console.print(table)
    tools = Table(title="tool calls", title_justify="left")
    for col in ("tool", "calls", "failed"):
        tools.add_column(col, justify="right" if col != "tool" else "left")
    for name, c in summary["tool_calls"].items():
        tools.add_row(name, str(c["calls"]), str(c["failed"]))
    if not summary["tool_calls"]:
        tools.add_row("(none)", "0", "0")
    console.print(tools)
    if tokens := summary.get("tokens"):
        cost = f", ${tokens['cost_usd']:.4f}" if "cost_usd" in tokens else ""
        console.print(f"Tokens: {tokens['total']:,} ({tokens['per_task']:,.0f} per task{cost})")
    console.print(f"Results: {Path(out_dir).resolve()}")
