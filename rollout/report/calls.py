"""Load one run folder's tool calls: the gateway's records joined with the client's.

The gateway appends one line per tools/call to `tool_stats/realtime_calls.jsonl`; the driver
writes one task per line to `trajectory.jsonl`, each with the tool calls the client made.
Both carry the same `call_id`, which is how a server-side record gains its round-trip time
and arguments. Either file may be missing, empty, or cut short by a crash mid-write: a line
that does not parse is skipped with a warning, never fatal.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rollout.jsonl import iter_jsonl, read_jsonl
from rollout.report.errors import NotARunFolderError
from rollout.run_folder import CONFIG_FILE, FINGERPRINT_FILE, STATS_DIR, TRAJECTORY_FILE, calls_path, read_json

logger = logging.getLogger(__name__)


GATEWAY_COLUMNS = (
    "call_id", "tool_name", "task_id", "worker_id", "ok", "outcome",
    "error", "duration_ms", "timestamp", "result_ids",
)
"""Fields of one `realtime_calls.jsonl` line (`rollout.gateway.stats.CallStat`)."""

CLIENT_COLUMNS = ("rtt_ms", "client_outcome", "arguments", "result_doc_ids")
"""Fields taken from the trajectory's tool call with the same `call_id` (None/NaN when unmatched)."""

CALL_COLUMNS = (*GATEWAY_COLUMNS, *CLIENT_COLUMNS, "gold_doc_ids", "mode", "run_dir")
"""Columns of `load_calls`: `gold_doc_ids` is the task's gold list (None when unknown)."""


def run_mode(run_dir: Path) -> str:
    """The run's `mode_name` from its config.yaml, else the folder's name."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG_FILE
    if path.is_file():
        try:
            cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            logger.warning("%s: unreadable (%s); using the folder name as the mode", path, e)
            cfg = None
        if isinstance(cfg, dict) and cfg.get("mode_name"):
            return str(cfg["mode_name"])
    return run_dir.resolve().name


def run_overrides(run_dir: Path) -> list[str]:
    """The identity overrides the run recorded (`agent.top_k=1`, ...); none for a run that recorded none."""
    identity = read_json(Path(run_dir) / FINGERPRINT_FILE) or {}
    overrides = identity.get("overrides")
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def run_labels(runs: list[Path]) -> list[str]:
    """Each run's mode, then the recorded overrides not shared by all the runs: `sparse,agent.top_k=1`."""
    recorded = [run_overrides(r) for r in runs]
    shared = set.intersection(*(set(o) for o in recorded)) if recorded else set()
    return [",".join([run_mode(r), *(o for o in own if o not in shared)]) for r, own in zip(runs, recorded, strict=True)]


_TASK_KEYS = ("id", "worker_id", "tool_calls", "metadata")


def _str_or_none(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _id_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _gateway_frame(lines: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for line in lines:
        ok = bool(line.get("ok", False))
        rows.append(
            {
                "call_id": _str_or_none(line.get("call_id")),
                "tool_name": str(line.get("tool_name") or ""),
                "task_id": _str_or_none(line.get("task_id")),
                "worker_id": _str_or_none(line.get("worker_id")),
                "ok": ok,
                "outcome": str(line.get("outcome") or ("ok" if ok else "unknown")),
                "error": line.get("error"),
                "duration_ms": line.get("duration_ms"),
                "timestamp": line.get("timestamp"),
                "result_ids": _id_list(line.get("result_ids")),
            }
        )
    df = pd.DataFrame(rows, columns=list(GATEWAY_COLUMNS))
    df["ok"] = df["ok"].astype(bool)
    for col in ("duration_ms", "timestamp"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


def _client_frame(tasks: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for task in tasks:
        for call in task.get("tool_calls") or []:
            if not isinstance(call, dict) or call.get("call_id") is None:
                continue
            rows.append(
                {
                    "call_id": str(call["call_id"]),
                    "rtt_ms": call.get("latency_ms"),
                    "client_outcome": _str_or_none(call.get("outcome")),
                    "arguments": call.get("arguments") if isinstance(call.get("arguments"), dict) else None,
                    "result_doc_ids": _id_list(call.get("result_doc_ids")) or None,
                    "client_task_id": _str_or_none(task.get("id")),
                    "client_worker_id": _str_or_none(task.get("worker_id")),
                }
            )
    df = pd.DataFrame(rows, columns=["call_id", *CLIENT_COLUMNS, "client_task_id", "client_worker_id"])
    df["rtt_ms"] = pd.to_numeric(df["rtt_ms"], errors="coerce").astype("float64")
    # A call id appears once per trajectory; keep the first if a rerun appended duplicates.
    return df.drop_duplicates("call_id", keep="first")


def _gold_by_task(tasks: list[dict[str, Any]]) -> dict[str, list[str]]:
    gold = {}
    for task in tasks:
        meta = task.get("metadata") if isinstance(task.get("metadata"), dict) else {}
        ids = _id_list(meta.get("gold_doc_ids"))
        if task.get("id") is not None and ids:
            gold[str(task["id"])] = ids
    return gold


def load_calls(run_dir: Path | str) -> pd.DataFrame:
    """Every tools/call the gateway recorded in `run_dir`, one row each (columns: `CALL_COLUMNS`).

    `rtt_ms`, `client_outcome`, `arguments` and `result_doc_ids` come from the trajectory's tool
    call with the same `call_id` (NaN/None without a match or without a trajectory); a task or
    worker id the gateway did not receive is taken from there too. `mode` is config.yaml's
    `mode_name`, else the folder's name.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunFolderError(f"{run_dir}: no such folder; pass a run folder such as results/<experiment>/<mode>")
    gateway = _gateway_frame(read_jsonl(calls_path(run_dir)))
    # Only what the report joins on: a task's events and messages would make this grow with the run.
    tasks = [{k: t[k] for k in _TASK_KEYS if k in t} for t in iter_jsonl(run_dir / TRAJECTORY_FILE)]
    df = gateway.merge(_client_frame(tasks), on="call_id", how="left", validate="many_to_one")
    df["task_id"] = df["task_id"].where(df["task_id"].notna(), df.pop("client_task_id"))
    df["worker_id"] = df["worker_id"].where(df["worker_id"].notna(), df.pop("client_worker_id"))
    gold = _gold_by_task(tasks)
    df["gold_doc_ids"] = pd.Series([gold.get(t) for t in df["task_id"]], index=df.index, dtype=object)
    for col in ("arguments", "result_doc_ids", "client_outcome"):
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df["mode"] = run_mode(run_dir)
    df["run_dir"] = str(run_dir)
    logger.debug("%s: %d gateway calls, %d matched to the trajectory", run_dir, len(df), int(df["rtt_ms"].notna().sum()))
    return df[list(CALL_COLUMNS)]
