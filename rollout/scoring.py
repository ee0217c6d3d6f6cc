"""Score a run's trajectory into evaluation_summary.json and print the summary table."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from rollout.metrics import contains_answer, exact_match, f1_score, retrieval_recall
from rollout.records import TaskResult

SUMMARY_FILE = "evaluation_summary.json"
TRAJECTORY_FILE = "trajectory.jsonl"


def read_trajectory(path: Path) -> list[TaskResult]:
    with Path(path).open(encoding="utf-8") as f:
        return [TaskResult.from_json(json.loads(line)) for line in f if line.strip()]


def score_tasks(results: Sequence[TaskResult]) -> pd.DataFrame:
    """One row per task with its metrics and tool usage."""
    rows = []
    for r in results:
        # Gold ids may name passages or, for chunked corpora, their source documents.
        retrieved = [i for c in r.tool_calls for i in (*c.get("result_ids", []), *c.get("result_doc_ids", []))]
        rows.append(
            {
                "id": r.id,
                "exact_match": exact_match(r.prediction, r.golden_answers),
                "f1": f1_score(r.prediction, r.golden_answers),
                "contains_answer": contains_answer(r.prediction, r.golden_answers),
                "retrieval_recall": retrieval_recall(retrieved, r.metadata.get("gold_doc_ids", [])),
                "tool_calls": len(r.tool_calls),
                "error": r.error is not None,
                "hops": r.metadata.get("hops"),
                "style": r.metadata.get("style"),
            }
        )
    return pd.DataFrame(rows)


def _means(df: pd.DataFrame) -> dict[str, float | None]:
    out = {}
    for m in ("exact_match", "f1", "contains_answer", "retrieval_recall"):
        col = df[m].dropna() if m in df else pd.Series(dtype=float)
        out[m] = round(float(col.mean()), 4) if len(col) else None
    return out


def summarize(results: Sequence[TaskResult], *, mode: str, gateway_file: str, wall_time_s: float) -> dict[str, Any]:
    """The evaluation summary: overall metrics, breakdowns by hops and style, tool usage, errors."""
    df = score_tasks(results)
    calls = Counter(c["name"] for r in results for c in r.tool_calls)
    failed = Counter(c["name"] for r in results for c in r.tool_calls if not c.get("ok"))
    summary: dict[str, Any] = {
        "n": len(results),
        "metrics": _means(df) if len(df) else dict.fromkeys(("exact_match", "f1", "contains_answer", "retrieval_recall")),
        "mode": mode,
        "gateway_file": gateway_file,
        "errors": int(df["error"].sum()) if len(df) else 0,
        "tool_calls": {name: {"calls": n, "failed": failed.get(name, 0)} for name, n in sorted(calls.items())},
        "tool_calls_per_task": round(float(df["tool_calls"].mean()), 3) if len(df) else 0.0,
        "wall_time_s": round(wall_time_s, 2),
    }
    for key in ("hops", "style"):
        if len(df) and df[key].notna().any():
            summary[f"by_{key}"] = {
                str(k): {"n": len(g), **_means(g)} for k, g in df.groupby(df[key].astype(str), sort=True)
            }
    return summary


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(out_dir) / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_summary(summary: dict[str, Any], out_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    m = summary["metrics"]
    table = Table(title=f"rollout · mode={summary['mode']} · {summary['n']} tasks", title_justify="left")
    for col in ("EM", "F1", "contains", "recall", "errors", "time (s)"):
        table.add_column(col, justify="right")
    table.add_row(
        _fmt(m["exact_match"]), _fmt(m["f1"]), _fmt(m["contains_answer"]), _fmt(m["retrieval_recall"]),
        str(summary["errors"]), f"{summary['wall_time_s']:.1f}",
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
    console.print(f"Results: {Path(out_dir).resolve()}")
