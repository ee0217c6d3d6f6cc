"""Per-tool-call statistics: a gateway middleware records every tools/call as it happens.

Each call becomes one line of `realtime_calls.jsonl`, appended and flushed before the
response leaves the gateway, so a crash loses nothing already answered. Reports are
rebuilt from that file by `rollout.report`, never from in-memory counters.

The middleware also reads what each tools/list tells clients: the tools it marks degraded
(`rollout.wire.META_DEGRADED`) are kept in `degraded_tools.json` beside the ledger, for the report.

A gateway may serve several runs (the jobs of a sweep share one, `rollout.run.sweep_gateway`): a run registers its
folder (`POST /runs`, `rollout.gateway.runs_api`) and `RunLedgers` routes each call to the ledger of the run its
`_meta` names (`rollout.wire.META_RUN_ID`), so every call is counted once, in the folder of the run that made it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rollout.run_folder import CALLS_FILE, DEGRADED_FILE, STATS_DIR, write_json
from rollout.wire import (
    META_ACCOUNTING,
    META_ATTEMPT,
    META_CALL_ID,
    META_RUN_ID,
    META_STEP,
    META_TASK_ID,
    META_TRAFFIC,
    META_WORKER_ID,
    Outcome,
    classify_result,
    degraded_tools,
)

logger = logging.getLogger(__name__)

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
    outcome: Outcome
    """Category of the result."""
    error: str | None
    """Error text when not ok."""
    duration_ms: float
    """Time spent in the gateway, from request to response."""
    timestamp: float
    """Unix time the call arrived."""
    result_ids: list[str]
    """Ids of the passages or documents the tool returned, in its order (`rollout.wire.result_ids`); empty when
    it returned none."""
    attempt: int | None = None
    """The task's attempt number (request `_meta`); the report counts the attempt the trajectory kept."""
    accounting: dict[str, Any] | None = None
    """What the call cost (`rollout.accounting.CallAccounting` as JSON: stage, context tokens, the tool's own
    LLM tokens and time); None on calls the gateway refused before a tool ran."""
    via: str | None = None
    """The route that made the call when it was not a tools/call: "retrieve" for a query sent to `POST /retrieve`
    (`rollout.gateway.retrieve_api`), which no trajectory holds. Left out of the line when None."""
    traffic: str | None = None
    """"train" for a trainer's call (`rollout.wire.META_TRAFFIC`); left out of the line when None (an evaluation's)."""
    step: int | None = None
    """The trainer's step number when it sent one (`rollout.wire.META_STEP`); left out of the line when None."""


_STAT_FIELDS = tuple(f.name for f in fields(CallStat))
_OPTIONAL_FIELDS = ("via", "traffic", "step")


def _line(stat: CallStat) -> str:
    # The fields read directly, not `dataclasses.asdict`: its deep copy was most of a record's cost.
    record = {name: getattr(stat, name) for name in _STAT_FIELDS}
    for optional in _OPTIONAL_FIELDS:
        if record[optional] is None:
            del record[optional]  # an evaluation's tools/call line stays as it was
    return json.dumps(record) + "\n"


def ledger_lines(stats: Iterable[CallStat]) -> str:
    """Ledger lines of `stats`, for `StatsCollector.append`."""
    return "".join(_line(stat) for stat in stats)


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as f:
        if f.seek(0, 2) == 0:
            return False
        f.seek(-1, 2)
        return f.read(1) != b"\n"


class StatsCollector:
    """Appends one JSON line per call to `stats_dir/realtime_calls.jsonl` (or `ledger_name`, one per replica)."""

    def __init__(self, stats_dir: Path, ledger_name: str = CALLS_FILE):
        self.stats_dir = Path(stats_dir)
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.stats_dir / ledger_name
        self._file = self.path.open("a", encoding="utf-8")
        if _ends_mid_line(self.path):
            # A gateway killed mid-write left a partial line; end it so it does not swallow the next one.
            self._file.write("\n")
        self._degraded: dict[str, str] | None = None
        """The degraded tools last written (None before the first tools/list)."""

    def record(self, stat: CallStat) -> None:
        # One write per line from the gateway's single event loop: lines never interleave.
        self._file.write(_line(stat))
        self._file.flush()

    def append(self, lines: str) -> None:
        """Append records `ledger_lines` wrote (on a worker thread: a `/retrieve` request's hundreds of queries),
        in one write and one flush from the event loop, as `record` writes."""
        self._file.write(lines)
        self._file.flush()

    def note_degraded(self, degraded: dict[str, str]) -> None:
        """Keep `degraded_tools.json` in step with the degraded tools (name → reason) a tools/list offered: written
        when there are any, removed when there are none (one an earlier gateway left here is stale)."""
        if degraded == self._degraded:
            return
        self._degraded = dict(degraded)
        path = self.stats_dir / DEGRADED_FILE
        if degraded:
            logger.debug("Listing degraded tools: %s", ", ".join(degraded))
            write_json(path, degraded)
        else:
            path.unlink(missing_ok=True)

    def reopen_if_removed(self) -> None:
        """Open the ledger anew when its file is gone (a run with resume=false removed it to start over): lines
        written to a removed file would reach no one."""
        if not self.path.exists():
            self._file.close()
            self._file = self.path.open("a", encoding="utf-8")
            self._degraded = None  # and the degraded list is written again, as into a new folder

    def close(self) -> None:
        self._file.close()


class RunLedgers:
    """Where a gateway's call records go: the ledger of the registered run a call names, else `default` (the
    gateway's `--output-dir`; None records such calls nowhere).

    A registered run's collector stays open until the gateway stops (`close`): a call of a finished run that lands
    late still reaches that run's ledger. Runs registered with one folder share one collector, and a folder that is
    the default's uses the default: one open file per ledger, so lines never interleave. `degraded_tools.json`
    follows every tools/list into every folder, and a run registered later gets the list known by then: the same
    gateway serves them all, so what it serves degraded is the same for each."""

    def __init__(self, default: StatsCollector | None = None):
        self.default = default
        self._by_dir: dict[Path, StatsCollector] = {} if default is None else {default.stats_dir.resolve(): default}
        self._by_run: dict[str, StatsCollector] = {}
        self._degraded: dict[str, str] | None = None
        """The degraded tools of the last whole tools/list (None before the first)."""

    def register(self, run_id: str, output_dir: Path) -> StatsCollector:
        """Record the calls of `run_id` in `output_dir/tool_stats/realtime_calls.jsonl` from now on; its collector."""
        stats_dir = (Path(output_dir) / STATS_DIR).resolve()
        collector = self._by_dir.get(stats_dir)
        if collector is None:
            collector = self._by_dir[stats_dir] = StatsCollector(stats_dir)
        else:
            collector.reopen_if_removed()
        if self._degraded is not None:
            collector.note_degraded(self._degraded)
        self._by_run[run_id] = collector
        logger.debug("Recording the calls of run %s in %s", run_id, collector.path)
        return collector

    def collector_for(self, run_id: Any) -> StatsCollector | None:
        """The collector of a call's run id (`_meta`): a registered run's, else the default."""
        return self._by_run.get(run_id, self.default) if isinstance(run_id, str) else self.default

    def note_degraded(self, degraded: dict[str, str]) -> None:
        self._degraded = dict(degraded)
        for collector in self._by_dir.values():
            try:
                collector.note_degraded(degraded)
            except OSError as e:  # a run folder removed since (a refused run's): the listing still answers
                logger.warning("Could not write %s in %s: %s", DEGRADED_FILE, collector.stats_dir, e)

    def close(self) -> None:
        for collector in self._by_dir.values():
            collector.close()


class ToolStatsMiddleware:
    """MCP server middleware: times each tools/call and hands a `CallStat` to the collector of the call's run."""

    def __init__(self, ledgers: RunLedgers):
        self.ledgers = ledgers

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/list":
            listed = await call_next(ctx)
            # Only a whole listing: one page of a paginated one says nothing of the others.
            if isinstance(listed, dict) and not listed.get("nextCursor") and not (ctx.params or {}).get("cursor"):
                self.ledgers.note_degraded(degraded_tools(listed.get("tools") or []))
            return listed
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        meta = dict(params.get("_meta") or {})
        collector = self.ledgers.collector_for(meta.get(META_RUN_ID))
        if collector is None:
            return await call_next(ctx)
        started = time.time()
        t0 = time.perf_counter()
        ok, outcome, error, ids, cost = False, "protocol_error", None, [], None
        try:
            result = await call_next(ctx)
            ok, outcome, error, ids = classify_result(result)
            cost = _result_meta(result).get(META_ACCOUNTING)
            return result
        except BaseException as e:
            outcome = "cancelled" if _is_cancellation(e) else "protocol_error"
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            collector.record(
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
                    attempt=_int_or_none(meta.get(META_ATTEMPT)),
                    accounting=cost,
                    traffic=_str_or_none(meta.get(META_TRAFFIC)),
                    step=_int_or_none(meta.get(META_STEP)),
                )
            )


def _result_meta(result: Any) -> dict[str, Any]:
    meta = result.get("_meta") if isinstance(result, dict) else getattr(result, "meta", None)
    return meta if isinstance(meta, dict) else {}


def _is_cancellation(e: BaseException) -> bool:
    import anyio

    return isinstance(e, anyio.get_cancelled_exc_class())


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None
