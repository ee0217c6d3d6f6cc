"""Per-tool-call statistics: a gateway middleware records every tools/call as it happens.

Each call becomes one line of `realtime_calls.jsonl`, appended and flushed before the
response leaves the gateway, so a crash loses nothing already answered. Reports are
rebuilt from that file, never from in-memory counters.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

logger = logging.getLogger(__name__)

CALLS_FILE = "realtime_calls.jsonl"
REPORT_FILE = "report.json"
META_TASK_ID = "rollout/task_id"
META_WORKER_ID = "rollout/worker_id"
META_CALL_ID = "rollout/call_id"

StatsOutcome = Literal["ok", "tool_error", "invalid_arguments", "unknown_tool", "protocol_error", "cancelled"]


@dataclass(frozen=True, slots=True)
class CallStat:
    """One tools/call as the gateway saw it."""

    call_id: str | None
    """Client-sent id (request `_meta`), joins this line to the trajectory's tool call."""
    tool_name: str
    """Tool the client asked for."""
    task_id: str | None
    """Task the call belongs to (request `_meta`)."""
    worker_id: str | None
    """Rollout worker that sent it (request `_meta`)."""
    ok: bool
    """True when the tool answered without error."""
    outcome: StatsOutcome
    """Category of the result."""
    error: str | None
    """Error text when not ok."""
    duration_ms: float
    """Time spent in the gateway, from request to response."""
    timestamp: float
    """Unix time the call arrived."""
    result_ids: list[str]
    """Passage ids a retrieval tool returned, best first."""


class StatsCollector:
    """Appends one JSON line per call to `stats_dir/realtime_calls.jsonl`."""

    def __init__(self, stats_dir: Path):
        self.stats_dir = Path(stats_dir)
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.stats_dir / CALLS_FILE
        self._file = self.path.open("a", encoding="utf-8")

    def record(self, stat: CallStat) -> None:
        # One write per line from the gateway's single event loop: lines never interleave.
        self._file.write(json.dumps(asdict(stat)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _field(result: Any, attr: str, key: str) -> Any:
    return result.get(key) if isinstance(result, dict) else getattr(result, attr, None)


def _classify(result: Any) -> tuple[bool, StatsOutcome, str | None, list[str]]:
    if not _field(result, "is_error", "isError"):
        structured = _field(result, "structured_content", "structuredContent") or {}
        ids = [str(r.get("id")) for r in structured.get("results", []) if isinstance(r, dict)]
        return True, "ok", None, ids
    content = _field(result, "content", "content") or []
    text = " ".join(str(_field(c, "text", "text") or "") for c in content).strip()
    if "validation error" in text:
        outcome: StatsOutcome = "invalid_arguments"
    elif text.startswith("Unknown tool"):
        outcome = "unknown_tool"
    else:
        outcome = "tool_error"
    return False, outcome, text, []


class ToolStatsMiddleware:
    """MCP server middleware: times each tools/call and hands a `CallStat` to the collector."""

    def __init__(self, collector: StatsCollector):
        self.collector = collector

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        meta = dict(params.get("_meta") or {})
        started = time.time()
        t0 = time.perf_counter()
        ok, outcome, error, ids = False, "protocol_error", None, []
        try:
            result = await call_next(ctx)
            ok, outcome, error, ids = _classify(result)
            return result
        except BaseException as e:
            outcome = "cancelled" if _is_cancellation(e) else "protocol_error"
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self.collector.record(
                CallStat(
                    call_id=meta.get(META_CALL_ID),
                    tool_name=str(params.get("name", "")),
                    task_id=meta.get(META_TASK_ID),
                    worker_id=meta.get(META_WORKER_ID),
                    ok=ok,
                    outcome=outcome,
                    error=error,
                    duration_ms=(time.perf_counter() - t0) * 1000.0,
                    timestamp=started,
                    result_ids=ids,
                )
            )


def _is_cancellation(e: BaseException) -> bool:
    import anyio

    return isinstance(e, anyio.get_cancelled_exc_class())


def read_calls(stats_dir: Path) -> pd.DataFrame:
    """All recorded calls of a run as a DataFrame (empty with the right columns when none)."""
    path = Path(stats_dir) / CALLS_FILE
    columns = list(CallStat.__dataclass_fields__)
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame(columns=columns)
    return pd.read_json(path, lines=True, dtype={"call_id": str, "task_id": str, "worker_id": str})


def _per_group(df: pd.DataFrame, key: str, name: str) -> list[dict[str, Any]]:
    rows = []
    for value, g in df.groupby(key, sort=True, dropna=False):
        total = len(g)
        success = int(g["ok"].sum())
        rows.append(
            {
                name: None if pd.isna(value) else str(value),
                "total_calls": total,
                "success_calls": success,
                "failed_calls": total - success,
                "success_rate": round(success / total, 4) if total else None,
                "p50_ms": round(float(g["duration_ms"].quantile(0.5)), 3),
                "p95_ms": round(float(g["duration_ms"].quantile(0.95)), 3),
                "calls_by_tool": {str(k): int(v) for k, v in g["tool_name"].value_counts().sort_index().items()},
            }
        )
    return rows


def build_report(stats_dir: Path) -> dict[str, Any]:
    """Summary, per-tool and per-task tables of one run's tool calls."""
    df = read_calls(stats_dir)
    total = len(df)
    success = int(df["ok"].sum()) if total else 0
    tools = _per_group(df, "tool_name", "tool_name") if total else []
    for row in tools:
        row.pop("calls_by_tool")
    return {
        "summary": {
            "total_calls": total,
            "success_calls": success,
            "failed_calls": total - success,
            "success_rate": round(success / total, 4) if total else None,
            "tools_used": sorted(df["tool_name"].unique().tolist()) if total else [],
            "outcomes": {str(k): int(v) for k, v in df["outcome"].value_counts().sort_index().items()} if total else {},
        },
        "tools": tools,
        "tasks": _per_group(df, "task_id", "task_id") if total else [],
    }


def write_report(stats_dir: Path) -> Path:
    """Rebuild `report.json` from `realtime_calls.jsonl`."""
    stats_dir = Path(stats_dir)
    stats_dir.mkdir(parents=True, exist_ok=True)
    out = stats_dir / REPORT_FILE
    out.write_text(json.dumps(build_report(stats_dir), indent=2) + "\n", encoding="utf-8")
    return out
