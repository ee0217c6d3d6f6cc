"""Tool use over a training run: per trainer step, or per window of time, how the calls spread over the tools.

A trainer that calls the gateway's tools (over MCP with `rollout.wire.META_STEP`, or `POST /retrieve` with the
`X-Rollout-Step` header) leaves one ledger line per call with its step number. This report cuts those calls into
windows and says, per window and tool, what the policy did; it reads a gateway's `--output-dir` (a ledger and no
trajectory) and run folders alike, counting calls as `rollout.report.tool_calls.ledger` does.

Definitions
- Windows: by step, `window` steps each, counted from the lowest step seen (1: a window per step); by time,
  `window` seconds each, counted from the first counted call. Only windows with calls get a row.
- A call without a step (by step), or without a time (a call no gateway saw and the client did not time), is in
  no window: it is counted apart (`unplaced_calls`), never silently dropped.
- `share`: the tool's calls / the window's calls. `mean_returned` (result depth): the mean number of result ids
  over the successful calls (a failed call returns none; counting it would mix errors into depth).
  `p50_ms`/`p95_ms`: the gateway's `duration_ms`, pandas' linear interpolation. `error_share`: calls not ok / calls.
- Traffic: "train" counts the calls marked `traffic: train` (`rollout.wire.TRAFFIC_TRAIN`), "eval" those with no
  mark (an evaluation's), "all" every call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rollout.errors import NotARunFolderError, ReportError
from rollout.report.tool_calls.ledger import load_calls
from rollout.report.tool_calls.windows import By, Traffic, Windowing, duration, parse_window
from rollout.run_folder import CALLS_FILE, STATS_DIR, is_run_folder, ledger_paths
from rollout.wire import TRAFFIC_TRAIN

EVAL = "eval"
"""The name calls without a traffic mark are counted under."""
KEY_COLUMNS = {"step": ("step", "last_step"), "time": ("start_s", "end_s")}
"""A window's bounds in the tables: its first and last step, or its seconds since the first call [start, end)."""


@dataclass(slots=True)
class ToolUse:
    """The report of one folder: `summary`, `windows` (a row per window), `tools` (a row per window and tool)."""

    summary: dict[str, Any]
    windows: pd.DataFrame
    tools: pd.DataFrame
    tool_names: list[str] = field(default_factory=list)


def traffic_of(df: pd.DataFrame) -> pd.Series:
    """Each call's traffic, `EVAL` where the line had no mark."""
    return df["traffic"].astype(object).where(df["traffic"].notna(), EVAL).astype(str)


def _load(path: Path) -> pd.DataFrame:
    if not path.is_dir():
        raise NotARunFolderError(f"{path}: no such folder; pass a gateway's --output-dir or a run folder")
    if not ledger_paths(path):
        raise NotARunFolderError(
            f"{path}: no {STATS_DIR}/{CALLS_FILE} here; pass the folder a gateway was started with as --output-dir "
            "(rollout gateway ... --output-dir DIR), or a run folder"
        )
    calls = load_calls(path)
    if not len(calls):
        raise ReportError(
            f"{path}: {STATS_DIR}/{CALLS_FILE} holds no tool calls yet; report again once the trainer has called "
            "the gateway's tools"
        )
    return calls


def _select(calls: pd.DataFrame, traffic: Traffic, path: Path) -> pd.DataFrame:
    if traffic == "all":
        return calls
    kinds = traffic_of(calls)
    chosen = calls[kinds == (TRAFFIC_TRAIN if traffic == "train" else EVAL)]
    if not len(chosen):
        seen = ", ".join(f"{n} {k}" for k, n in kinds.value_counts().sort_index().items())
        raise ReportError(f"{path}: none of its {len(calls)} calls is {traffic} traffic ({seen}); pass --traffic all")
    return chosen


def _place(calls: pd.DataFrame, w: Windowing) -> tuple[pd.DataFrame, float | None, int | None]:
    """`calls` that fall in a window, with their window's index `w_index` and bounds; the first call's time and the
    lowest step (the origins)."""
    first_time = calls["timestamp"].min()
    first_time = None if pd.isna(first_time) else float(first_time)
    steps = calls["step"].dropna()
    first_step = int(steps.min()) if len(steps) else None
    if w.by == "step":
        placed = calls[calls["step"].notna()].copy()
        index = (placed["step"].astype("int64") - (first_step or 0)) // int(w.size)
        placed["w_index"] = index
        placed["step_"] = (first_step or 0) + index * int(w.size)
        placed["last_step"] = placed["step_"] + int(w.size) - 1
        placed = placed.drop(columns="step").rename(columns={"step_": "step"})
    else:
        placed = calls[calls["timestamp"].notna()].copy()
        index = ((placed["timestamp"] - (first_time or 0.0)) // w.size).astype("int64")
        placed["w_index"] = index
        placed["start_s"] = index * w.size
        placed["end_s"] = placed["start_s"] + w.size
    return placed, first_time, first_step


def _label(w: Windowing, first: float, last: float) -> str:
    if w.by == "step":
        return f"{int(first)}" if first == last else f"{int(first)}-{int(last)}"
    return f"{duration(first)}-{duration(last)}"


def _stats(g: pd.core.groupby.DataFrameGroupBy) -> pd.DataFrame:
    """Calls, failures, depth and latency of each group of a frame with `ok`, `returned_ok` and `duration_ms`."""
    calls = g.size()
    out = pd.DataFrame({
        "calls": calls,
        "failed_calls": calls - g["ok"].sum().astype(int),
        "mean_returned": g["returned_ok"].mean().round(3),
        "p50_ms": g["duration_ms"].quantile(0.5).round(3),
        "p95_ms": g["duration_ms"].quantile(0.95).round(3),
    })
    out["error_share"] = (out["failed_calls"] / out["calls"]).round(6)
    return out


def _none(value: Any) -> Any:
    return None if not isinstance(value, (list, dict, str)) and pd.isna(value) else value


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts, NaN/NA as None."""
    return [{k: _none(v) for k, v in row.items()} for row in table.astype(object).to_dict("records")]


def build_tool_use(path: Path | str, by: By, window: str | None = None, traffic: Traffic = "all") -> ToolUse:
    """The tool-use report of a gateway's output folder or a run folder; see the module docstring."""
    path = Path(path)
    w = parse_window(by, window)
    ledger = _load(path)
    calls = _select(ledger, traffic, path)
    placed, first_time, first_step = _place(calls, w)
    if not len(placed):
        missing = "a step" if by == "step" else "a time"
        fix = ("send the step with each call (step= over MCP, the X-Rollout-Step header on /retrieve) or use --by time"
               if by == "step" else "use --by step")
        raise ReportError(f"{path}: none of its {len(calls)} counted calls carries {missing}; {fix}")
    placed["returned_ok"] = [len(ids) if ok else float("nan") for ids, ok in zip(placed["result_ids"], placed["ok"],
                                                                                  strict=True)]
    keys = list(KEY_COLUMNS[by])
    tool_names = sorted(placed["tool_name"].astype(str).unique().tolist())
    bounds = placed.groupby("w_index")[keys].first()
    windows = _stats(placed.groupby("w_index")).join(bounds)
    per_tool = _stats(placed.groupby(["w_index", "tool_name"]))
    # Every tool in every window, 0 calls where it had none: a tool the policy stopped using shows as 0%.
    grid = pd.MultiIndex.from_product([windows.index, tool_names], names=["w_index", "tool_name"])
    per_tool = per_tool.reindex(grid)
    per_tool["calls"] = per_tool["calls"].fillna(0).astype(int)
    per_tool["failed_calls"] = per_tool["failed_calls"].fillna(0).astype(int)
    per_tool = per_tool.reset_index().join(windows[[*keys, "calls"]].rename(columns={"calls": "window_calls"}),
                                           on="w_index")
    per_tool["share"] = (per_tool["calls"] / per_tool["window_calls"]).round(6)
    shares = per_tool.pivot(index="w_index", columns="tool_name", values="share")
    for tool in tool_names:
        windows[f"share_{tool}"] = shares[tool]
    windows["window"] = [_label(w, a, b) for a, b in zip(windows[keys[0]], windows[keys[1]], strict=True)]
    per_tool["window"] = windows.loc[per_tool["w_index"], "window"].to_numpy()
    stat_columns = ["calls", "failed_calls", "error_share", "mean_returned", "p50_ms", "p95_ms"]
    windows = windows.reset_index(drop=True)[["window", *keys, *stat_columns, *(f"share_{t}" for t in tool_names)]]
    per_tool = per_tool[["window", *keys, "tool_name", "calls", "window_calls", "share", *stat_columns[1:]]]
    by_traffic = traffic_of(ledger).value_counts().sort_index()
    summary = {
        "run_dir": str(path),
        "has_trajectory": is_run_folder(path),
        "by": by,
        "window": w.size,
        "window_unit": w.unit,
        "traffic": traffic,
        "calls_by_traffic": {str(k): int(v) for k, v in by_traffic.items()},
        "ledger_calls": len(ledger),
        "counted_calls": len(calls),
        "placed_calls": len(placed),
        "unplaced_calls": len(calls) - len(placed),
        "via_retrieve_calls": int((calls["via"] == "retrieve").sum()),
        "first_call_at": first_time,
        "first_step": first_step,
        "windows": len(windows),
        "tools": tool_names,
    }
    return ToolUse(summary, windows, per_tool, tool_names)


def output_paths(path: Path | str, by: By) -> dict[str, Path]:
    """Where the report goes: tool_stats/by_<by>.json, by_<by>_windows.csv, by_<by>_tools.csv (`write_tool_use`) and
    by_<by>.png (`rollout.report.tool_calls.use_plot`)."""
    stats_dir = Path(path) / STATS_DIR
    return {"json": stats_dir / f"by_{by}.json", "windows": stats_dir / f"by_{by}_windows.csv",
            "tools": stats_dir / f"by_{by}_tools.csv", "plot": stats_dir / f"by_{by}.png"}


def write_tool_use(path: Path | str, use: ToolUse) -> list[Path]:
    """Write the report's JSON and its two tables as CSV under `path`/tool_stats (the plot: `tool_use_plot`);
    returns the paths."""
    out = output_paths(path, use.summary["by"])
    out["json"].parent.mkdir(parents=True, exist_ok=True)
    report = {"summary": use.summary, "windows": records(use.windows), "tools": records(use.tools)}
    out["json"].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    use.windows.to_csv(out["windows"], index=False)
    use.tools.to_csv(out["tools"], index=False)
    return [out["windows"], out["tools"], out["json"]]
