"""Load one run folder's tool calls: the gateway's records joined with the client's.

The gateway appends one line per tools/call to `tool_stats/realtime_calls.jsonl` (the ledger; each
replica of a Ray Serve gateway keeps its own, and they are read together);
the driver writes one task per line to `trajectory.jsonl`, each with the tool calls the client
made. Both carry the same `call_id`, which is how a server-side record gains its round-trip time
and arguments. Either file may be missing, empty, or cut short by a crash mid-write: a line
that does not parse is skipped with a warning, never fatal.

Every call is counted once. When a run folder has a trajectory, the calls counted are exactly
the tool calls of its task records: a ledger record whose call id no kept record made belongs to
a discarded attempt (a worker died under the task, or the task ended in a failure and ran again
on resume) and is listed apart (`discarded_calls`); a call sent again on a new session after a
broken stream has one id and is counted once; a call that never reached the gateway (transport
error) is counted from the client's record. Without a trajectory (a gateway run on its own) every
ledger record counts, and so does, in any run folder, a trainer's call, which no trajectory holds: a query sent to
the gateway's `POST /retrieve` (its record says `"via": "retrieve"`) or a tools/call marked `"traffic": "train"`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rollout.accounting import CallAccounting
from rollout.errors import NotARunFolderError
from rollout.jsonl import iter_jsonl, read_jsonl
from rollout.run_folder import (
    CONFIG_FILE,
    FINGERPRINT_FILE,
    is_run_folder,
    ledger_paths,
    ledger_source,
    read_json,
    trajectory_path,
)
from rollout.wire import TRAFFIC_TRAIN

logger = logging.getLogger(__name__)


GATEWAY_COLUMNS = (
    "call_id", "tool_name", "task_id", "worker_id", "attempt", "ok", "outcome",
    "error", "duration_ms", "timestamp", "result_ids", "context_tokens", "llm_tokens", "served_by",
    "via", "traffic", "step",
)
"""Fields of one `realtime_calls.jsonl` line (`rollout.gateway.stats.CallStat`); `context_tokens` and `llm_tokens`
(prompt + completion of the tool's own LLM calls) from its `accounting`, NaN when the line has none (a call
refused before a tool ran, a ledger of an older gateway); `served_by`: which ledger held it, "gateway" or a
replica's name (`rollout.run_folder.ledger_source`), None for a call no gateway saw; `via`, `traffic` and `step`
as the line has them (None/NA when it has not: an evaluation's tools/call)."""

CLIENT_COLUMNS = ("rtt_ms", "client_outcome", "arguments", "result_doc_ids", "repeat")
"""Fields taken from the trajectory's tool call with the same `call_id`, and `repeat` from its task (None/NaN/NA when
unmatched): the task id is the question's, so a call's task is its (`task_id`, `repeat`)."""

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


_TASK_KEYS = ("id", "worker_id", "tool_calls", "metadata", "attempts", "repeat")
_CLIENT_ONLY = (
    "client_task_id", "client_worker_id", "client_tool_name", "client_ok", "client_error", "client_started",
    "client_result_ids", "client_attempt",
)
"""What the trajectory says of a call, used where the ledger has no record of it (or no task id)."""


def _str_or_none(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _id_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _gateway_frame(ledgers: list[Path]) -> pd.DataFrame:
    rows = []
    for source, line in ((ledger_source(path), line) for path in ledgers for line in read_jsonl(path)):
        ok = bool(line.get("ok", False))
        cost = CallAccounting.from_json(line.get("accounting"))
        rows.append(
            {
                "call_id": _str_or_none(line.get("call_id")),
                "tool_name": str(line.get("tool_name") or ""),
                "task_id": _str_or_none(line.get("task_id")),
                "worker_id": _str_or_none(line.get("worker_id")),
                "attempt": line.get("attempt"),
                "ok": ok,
                "outcome": str(line.get("outcome") or ("ok" if ok else "unknown")),
                "error": line.get("error"),
                "duration_ms": line.get("duration_ms"),
                "timestamp": line.get("timestamp"),
                "result_ids": _id_list(line.get("result_ids")),
                "context_tokens": math.nan if cost is None else cost.context_tokens,
                "llm_tokens": math.nan if cost is None else cost.llm_tokens,
                "served_by": source,
                "via": _str_or_none(line.get("via")),
                "traffic": _str_or_none(line.get("traffic")),
                "step": _int_or_none(line.get("step")),
            }
        )
    df = pd.DataFrame(rows, columns=list(GATEWAY_COLUMNS))
    if len(ledgers) > 1:
        # Replicas each keep a ledger; in time order, "the last answer" below means the same as in one file.
        df = df.sort_values("timestamp", kind="stable", ignore_index=True)
    df["ok"] = df["ok"].astype(bool)
    for col in ("attempt", "step"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("duration_ms", "timestamp", "context_tokens", "llm_tokens"):
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
                    "client_tool_name": str(call.get("name") or ""),
                    "client_ok": bool(call.get("ok", False)),
                    "client_error": call.get("error"),
                    "client_started": call.get("started"),
                    "client_result_ids": _id_list(call.get("result_ids")),
                    "client_attempt": task.get("attempts"),
                    "rtt_ms": call.get("latency_ms"),
                    "client_outcome": _str_or_none(call.get("outcome")),
                    "arguments": call.get("arguments") if isinstance(call.get("arguments"), dict) else None,
                    "result_doc_ids": _id_list(call.get("result_doc_ids")) or None,
                    "client_task_id": _str_or_none(task.get("id")),
                    "client_worker_id": _str_or_none(task.get("worker_id")),
                    "repeat": _int_or_none(task.get("repeat")) or 0,
                }
            )
    df = pd.DataFrame(rows, columns=["call_id", *CLIENT_COLUMNS, *_CLIENT_ONLY])
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


def _unrecorded(client: pd.DataFrame) -> pd.DataFrame:
    """Ledger-shaped rows for client calls the gateway has no record of (they never reached it)."""
    return pd.DataFrame({
        "call_id": client["call_id"],
        "tool_name": client["client_tool_name"],
        "task_id": None,
        "worker_id": None,
        "attempt": client["client_attempt"],
        "ok": client["client_ok"].astype(bool),
        "outcome": client["client_outcome"].fillna("unknown"),
        "error": client["client_error"],
        "duration_ms": float("nan"),
        "timestamp": pd.to_numeric(client["client_started"], errors="coerce"),
        "result_ids": client["client_result_ids"],
        "context_tokens": math.nan,
        "llm_tokens": math.nan,
        "served_by": None,
        "via": None,
        "traffic": None,
        "step": pd.NA,
    }, columns=list(GATEWAY_COLUMNS))


def split_calls(run_dir: Path | str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(counted calls, discarded ledger records) of `run_dir`; see the module docstring.

    Counted calls have the columns `CALL_COLUMNS`: `rtt_ms`, `client_outcome`, `arguments` and
    `result_doc_ids` come from the trajectory's tool call with the same `call_id` (NaN/None without
    a trajectory); a task or worker id the gateway did not receive is taken from there too. `mode`
    is the run's label (`run_mode`). Discarded records have the ledger's columns.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunFolderError(f"{run_dir}: no such folder; pass a run folder such as results/<experiment>/<mode>")
    gateway = _gateway_frame(ledger_paths(run_dir))
    # A call sent again after a broken stream reached the gateway twice under one id: keep its last answer.
    has_id = gateway["call_id"].notna()
    gateway = pd.concat([gateway[has_id].drop_duplicates("call_id", keep="last"), gateway[~has_id]]).sort_index()
    has_trajectory = is_run_folder(run_dir)
    # Only what the report joins on, of the tasks that called a tool: a task's events and messages, or a task
    # without calls, would make this grow with the run rather than with its calls.
    tasks = [{k: t[k] for k in _TASK_KEYS if k in t} for t in iter_jsonl(trajectory_path(run_dir)) if t.get("tool_calls")]
    client = _client_frame(tasks)
    discarded = gateway.iloc[:0]
    if has_trajectory:
        # A trainer's call (a query sent to POST /retrieve, or a tools/call marked traffic=train) is no trajectory's
        # call, and no discarded attempt's either.
        trainers = gateway["via"].notna() | (gateway["traffic"] == TRAFFIC_TRAIN)
        kept = gateway["call_id"].isin(client["call_id"]) | trainers
        gateway, discarded = gateway[kept], gateway[~kept]
        missing = client[~client["call_id"].isin(gateway["call_id"])]
        if len(missing):
            gateway = pd.concat([gateway, _unrecorded(missing)], ignore_index=True)
    df = gateway.merge(client, on="call_id", how="left", validate="many_to_one")
    # The trajectory names the question (a repeat's calls carry `<id>#<repeat>` to the gateway).
    df["task_id"] = df["client_task_id"].where(df["client_task_id"].notna(), df["task_id"])
    for col in ("worker_id", "attempt"):
        df[col] = df[col].where(df[col].notna(), df[f"client_{col}"])
    for col in ("attempt", "step", "repeat"):  # NA where the ledger had none: a concat of such rows leaves objects
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    gold = _gold_by_task(tasks)
    df["gold_doc_ids"] = pd.Series([gold.get(t) for t in df["task_id"]], index=df.index, dtype=object)
    for col in ("arguments", "result_doc_ids", "client_outcome", "via", "traffic"):
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df["mode"] = run_mode(run_dir)
    df["run_dir"] = str(run_dir)
    logger.debug("%s: %d calls counted, %d ledger records of discarded attempts", run_dir, len(df), len(discarded))
    return df[list(CALL_COLUMNS)], discarded.reset_index(drop=True)


def load_calls(run_dir: Path | str) -> pd.DataFrame:
    """The counted tool calls of `run_dir`, one row each (columns: `CALL_COLUMNS`); see `split_calls`."""
    return split_calls(run_dir)[0]
