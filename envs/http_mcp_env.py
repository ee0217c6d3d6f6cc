"""HttpMCPEnv: the tool surface of one gateway file, over one open MCP session.

An environment owns which tools exist, their schemas, the system prompt and how a tool
is called; the agent (policy) decides what to call. One env lives in each rollout worker
and keeps a single MCP session open for all of that worker's tasks (opening one costs
~40 ms, a call on an open session a few ms).

The session survives a gateway restart: when it breaks (the gateway died, or a call found the
transport gone), the owner task reopens it with exponential backoff and jitter for up to
`reconnect_timeout_s`, checks the gateway still offers the same tools, and calls waiting for it
go on; a call the break cut off is sent again once on the new session.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST, REQUEST_TIMEOUT, CallToolResult, Tool

from envs.mcp_session import describe, mcp_client, root_cause
from envs.schema import mcp_tool_to_function
from envs.task_session import TaskSession
from rollout.errors import GatewayError
from rollout.events import EventLog
from rollout.gateway_file import GatewayFile, load_gateway_file
from rollout.records import ToolCallRecord, ToolResult
from rollout.wire import (
    META_ATTEMPT,
    META_CALL_ID,
    META_GROUP,
    META_RUN_ID,
    META_TASK_ID,
    META_WORKER_ID,
    TOOLSETS_GROUP,
    Outcome,
    auth_headers,
    classify_result,
    resolve_token,
    result_text,
)

logger = logging.getLogger(__name__)


class _OneLineStreamErrors(logging.Filter):
    """The SDK's transports log a full traceback at ERROR when their stream breaks under them.

    A broken stream is a lost session, which this module reports and repairs itself, so the
    SDK's record becomes one WARNING line naming the exception: no traceback wall on the
    console of a run whose gateway restarts.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg, record.args = f"{record.getMessage()}: {describe(root_cause(record.exc_info[1]))}", None
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


for _transport in ("mcp.client.sse", "mcp.client.streamable_http"):
    logging.getLogger(_transport).addFilter(_OneLineStreamErrors())

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions using the tools provided. Call a tool when you need information, "
    "then reply with a short final answer only."
)

RECONNECT_BASE_S = 0.2
"""First backoff delay after a failed reconnection attempt; it doubles per attempt..."""
RECONNECT_CAP_S = 5.0
"""...up to this; each delay is drawn from [delay/2, delay] (jitter), so workers do not reconnect in lockstep."""

_SESSION_GONE = ("Session not found", "Session terminated")
"""Errors a streamable-HTTP gateway answers for a session id it does not know (it restarted)."""

State = Literal["new", "up", "reconnecting", "down", "failed", "closed"]
"""new: not started; up: a session is open; reconnecting: it broke, the owner is reopening it;
down: reconnecting for longer than `reconnect_timeout_s` (calls fail at once, the owner keeps
trying); failed: the gateway came back with other tools (final); closed: `close()` was called."""


class _ToolsChanged(GatewayError):
    """The gateway reopened with a different tool list: the run's fingerprint would be wrong."""


_E = TypeVar("_E", bound=BaseException)


def _is_transport_failure(e: BaseException) -> bool:
    """True when a call never got an answer because the session's transport broke."""
    e = root_cause(e)
    if isinstance(e, MCPError):
        if e.error.code == CONNECTION_CLOSED:
            return True
        return e.error.code == INVALID_REQUEST and any(s in e.error.message for s in _SESSION_GONE)
    # The SDK raises RuntimeError/ValueError (pydantic) for an answer it received but rejects (say, structured
    # content that fails the output schema): reopening the session would not change that answer.
    # Everything else is the transport: httpx/httpx2 errors, anyio's closed or broken streams, OSError.
    return not isinstance(e, (RuntimeError, ValueError))


def _find(e: BaseException, kind: type[_E]) -> _E | None:
    """`e`, or the first exception of type `kind` in the exception groups it nests."""
    if isinstance(e, kind):
        return e
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    return None


class HttpMCPEnv:
    """Connects to a gateway URL and offers the tools of the gateway file's groups."""

    def __init__(
        self,
        url: str,
        gateway_config_path: str | Path,
        *,
        worker_id: str = "worker-0",
        system_prompt: str | None = None,
        call_timeout_s: float = 60.0,
        auth_token: str | None = None,
        headers: dict[str, str] | None = None,
        reconnect_timeout_s: float = 120.0,
        run_id: str | None = None,
    ):
        """`url` ends with /mcp (streamable HTTP) or /sse (SSE). `auth_token` (default
        `$ROLLOUT_GATEWAY_TOKEN`) goes as `Authorization: Bearer ...` with `headers` on every request.
        When the session breaks, it is reopened for up to `reconnect_timeout_s`; calls wait for that.
        `run_id` goes with every call, so the gateway keeps per-task state apart between runs."""
        self.run_id = run_id
        self.url = url
        self.headers = {**(headers or {}), **auth_headers(resolve_token(auth_token))}
        self.worker_id = worker_id
        self.call_timeout_s = call_timeout_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self.gateway_config = self._load_gateway_config(gateway_config_path)
        self.system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT
        self.tools: list[Tool] = []
        self.tool_specs: list[dict[str, Any]] = []
        self.reconnects = 0
        """Sessions reopened after a break (for logs and tests)."""
        self._client: Client | None = None
        self._generation = 0
        """Counts sessions opened; a call remembers the one it used, so a stale failure reports nothing."""
        self._state: State = "new"
        self._changed = asyncio.Event()
        """Set (and replaced) whenever `_state` changes; calls waiting for a session wait on it."""
        self._failure = ""
        """Why calls cannot be sent (states down, failed, closed)."""
        self._broke_at: float | None = None
        self._break_reason: str | None = None
        """What a call saw when it found the session broken, for the log line."""
        self._wake = asyncio.Event()
        """Wakes the owner task out of holding a session: a call found it broken, or `close()`."""
        self._closing = False
        self._owner: asyncio.Task[None] | None = None

    def _load_gateway_config(self, config_path: str | Path) -> GatewayFile:
        """Read the gateway file; subclasses narrow it (see `HttpMCPRagEnv`)."""
        return load_gateway_file(config_path)

    @property
    def allowed_groups(self) -> list[str]:
        groups = self.gateway_config.tool_groups()
        return [*groups, TOOLSETS_GROUP] if self.gateway_config.dynamic_toolsets else groups

    def tool_specs_for(self, active_groups: Iterable[str]) -> list[dict[str, Any]]:
        """Specs of the tools in active groups, plus tools outside every group of the file (the
        tool-set management tools)."""
        sets, active = set(self.gateway_config.tool_groups()), set(active_groups)
        return [
            spec
            for tool, spec in zip(self.tools, self.tool_specs, strict=True)
            if (group := (tool.meta or {}).get(META_GROUP)) not in sets or group in active
        ]

    def group_of(self, tool_name: str) -> str | None:
        """The group a listed tool belongs to."""
        return next(((t.meta or {}).get(META_GROUP) for t in self.tools if t.name == tool_name), None)

    async def __aenter__(self) -> HttpMCPEnv:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the MCP session and list the tools this environment offers (raises GatewayError if it cannot)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._closing = False
        self._wake = asyncio.Event()
        self._owner = asyncio.create_task(self._hold_session(ready), name=f"mcp-session-{self.worker_id}")
        await ready

    # --- the owner task -------------------------------------------------------------------------

    async def _hold_session(self, ready: asyncio.Future[None]) -> None:
        # The SDK's session lives in anyio cancel scopes that must be entered and exited by the
        # same task; tasks of a worker come and go, so one owner task holds the session open, and
        # reopens it when it breaks.
        attempt = 0
        try:
            while not self._closing:
                opened = self._generation
                error: BaseException | None = None
                try:
                    await self._open_and_hold(first=not ready.done(), ready=ready)
                except Exception as e:  # the SDK raises transport errors, and ours, inside exception groups
                    if (changed := _find(e, _ToolsChanged)) is not None:
                        self._set_state("failed", str(changed))
                        logger.error("%s: %s", self.worker_id, changed)
                        return
                    error = root_cause(e)
                if self._closing:
                    return
                if not ready.done():
                    assert error is not None
                    ready.set_exception(
                        GatewayError(
                            f"could not open an MCP session at {self.url} ({type(error).__name__}). Is the gateway "
                            "running? Start one with: python -m rollout.gateway --config GATEWAY_FILE --port PORT. "
                            "If it requires a token, set gateway.auth_token= or ROLLOUT_GATEWAY_TOKEN"
                        )
                    )
                    return
                if self._generation != opened:
                    # A session was up and broke (leaving it may raise as well): reopen it at once, then back off.
                    reason = self._break_reason or (describe(error) if error is not None else "it ended")
                    logger.warning("%s lost its MCP session to %s (%s); reconnecting", self.worker_id, self.url, reason)
                    attempt = 0
                    continue
                attempt += 1
                await self._after_failed_attempt(attempt, error or ConnectionError("the session ended at once"))
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(GatewayError(f"environment closed before its MCP session at {self.url} opened"))
            if self._closing:
                self._set_state("closed", "environment is closed")

    async def _open_and_hold(self, *, first: bool, ready: asyncio.Future[None]) -> None:
        """Open a session, list the tools, and hold it until it breaks or `close()`; returns when it ended."""
        with anyio.CancelScope() as opening:
            if not first:
                # A gateway that accepts the connection and never answers must not eat the whole budget.
                opening.deadline = anyio.current_time() + max(1.0, min(self.call_timeout_s, self._budget_left()))
            async with mcp_client(self.url, headers=self.headers, read_timeout_s=self.call_timeout_s) as client:
                listed = (await client.list_tools()).tools
                opening.deadline = math.inf
                self._adopt_tools(listed, first=first)
                self._wake.clear()
                self._client = client
                self._generation += 1
                if first:
                    logger.debug("%s offers %s", self.worker_id, [t.name for t in self.tools])
                    ready.set_result(None)
                else:
                    self.reconnects += 1
                    logger.warning("%s reconnected to the gateway at %s after %.1f s", self.worker_id, self.url,
                                   time.monotonic() - (self._broke_at or time.monotonic()))
                self._broke_at = self._break_reason = None
                self._set_state("up")
                try:
                    while not self._closing and self._state == "up":
                        await self._wake.wait()
                        self._wake.clear()
                finally:
                    # Before the SDK's context exits (it may still talk to the server): no new call uses it.
                    self._client = None
                    if not self._closing:
                        self._session_lost()
        if opening.cancelled_caught:
            raise TimeoutError(f"no answer to initialize/list_tools within {self.call_timeout_s:.0f} s")

    def _adopt_tools(self, listed: list[Tool], *, first: bool) -> None:
        allowed = set(self.allowed_groups)
        tools = [t for t in listed if (t.meta or {}).get(META_GROUP) in allowed]
        specs = [mcp_tool_to_function(t) for t in tools]
        if first:
            self.tools, self.tool_specs = tools, specs
            return
        if specs != self.tool_specs:
            before, after = [t.name for t in self.tools], [t.name for t in tools]
            what = f"tools {before} became {after}" if before != after else f"the schemas of {after} changed"
            raise _ToolsChanged(
                f"the gateway at {self.url} came back with other tools: {what}. The run's tool fingerprint "
                "no longer matches; restart the gateway with the same gateway file and arguments"
            )

    def _session_lost(self, reason: str | None = None) -> None:
        """No call may use the session any more; the owner reopens it (and logs `reason`)."""
        self._client = None
        if self._state == "up":
            self._broke_at = time.monotonic()
            self._break_reason = reason
            self._set_state("reconnecting")

    async def _after_failed_attempt(self, attempt: int, error: BaseException) -> None:
        """Log, declare the gateway down once the budget is spent, and sleep the backoff delay."""
        logger.debug("%s: reconnection attempt %d to %s failed: %s", self.worker_id, attempt, self.url, describe(error))
        if self._broke_at is None:
            self._broke_at = time.monotonic()
        if self._state == "reconnecting" and self._budget_left() <= 0:
            message = (
                f"the gateway at {self.url} is down: no MCP session for {self.reconnect_timeout_s:.0f} s "
                f"(last error: {describe(error)}); still retrying every {RECONNECT_CAP_S:.0f} s"
            )
            logger.error("%s: %s", self.worker_id, message)
            self._set_state("down", message)
        delay = min(RECONNECT_CAP_S, RECONNECT_BASE_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        if self._state == "reconnecting":
            delay = min(delay, max(0.0, self._budget_left()))  # one last attempt right at the budget's end
        try:
            await asyncio.wait_for(self._wake.wait(), delay)  # close() wakes it
        except TimeoutError:
            pass
        self._wake.clear()

    def _budget_left(self) -> float:
        if self._broke_at is None:
            return self.reconnect_timeout_s
        return self.reconnect_timeout_s - (time.monotonic() - self._broke_at)

    def _set_state(self, state: State, failure: str = "") -> None:
        self._state, self._failure = state, failure
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _report_broken(self, generation: int, error: BaseException) -> None:
        """A call on session `generation` found the transport gone: have the owner reopen it (once, however
        many calls report it)."""
        if self._state == "up" and generation == self._generation and not self._closing:
            self._session_lost(describe(root_cause(error)))
            self._wake.set()

    async def _session(self, after: int, wait_s: float) -> tuple[Client | None, int, str]:
        """A client of a session newer than generation `after` and its generation, waiting up to `wait_s`
        while reconnecting; `(None, 0, why)` when there is none to be had."""
        deadline = time.monotonic() + wait_s
        while True:
            client = self._client
            if self._state == "up" and client is not None and self._generation > after:
                return client, self._generation, ""
            if self._state in ("down", "failed", "closed"):
                return None, 0, self._failure
            left = deadline - time.monotonic()
            if left <= 0:
                return None, 0, f"the gateway at {self.url} is down: no MCP session after waiting {wait_s:.0f} s"
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                pass

    async def close(self) -> None:
        """End the session; prompt even while reconnecting."""
        owner, self._owner = self._owner, None
        if owner is None:
            return
        self._closing = True
        self._wake.set()
        if self._state != "up":
            owner.cancel()  # opening a session or sleeping between attempts: nothing to close cleanly
        done, _ = await asyncio.wait({owner}, timeout=10.0)
        if not done:
            owner.cancel()
            await asyncio.wait({owner}, timeout=5.0)
        if owner.done() and not owner.cancelled():
            owner.exception()  # retrieved: what ended a session is logged by the owner already
        self._set_state("closed", "environment is closed")

    # --- calls ------------------------------------------------------------------------------------

    def for_task(self, task_id: str, events: EventLog | None = None, attempt: int = 1) -> TaskSession:
        """The tool surface one attempt at a task sees; it records that attempt's calls (and emits them to `events`)."""
        return TaskSession(self, task_id, events, attempt)

    async def call(
        self, name: str, arguments: dict[str, Any], task_id: str, call_id: str | None = None, attempt: int = 1
    ) -> tuple[ToolResult, ToolCallRecord]:
        """Call a tool for a task; failures become error results, never exceptions.

        While the session is being reopened the call waits for it (up to `reconnect_timeout_s`)."""
        call_id = call_id or uuid.uuid4().hex
        started = time.time()
        t0 = time.perf_counter()
        if name not in {t.name for t in self.tools}:
            offered = ", ".join(t.name for t in self.tools) or "none"
            text = f"Unknown tool {name!r}: this environment offers {offered}."
            return self._finish(call_id, name, arguments, started, t0, False, "unknown_tool", text, None, False)
        if self._owner is None:
            raise RuntimeError("environment is not started: use `async with env:` or `await env.start()`")
        meta = {META_CALL_ID: call_id, META_TASK_ID: task_id, META_WORKER_ID: self.worker_id, META_ATTEMPT: attempt,
                META_RUN_ID: self.run_id}
        used, retried = 0, False
        while True:
            client, used, why = await self._session(used, self.reconnect_timeout_s)
            if client is None:
                text = f"could not reach the gateway: {why}"
                return self._finish(call_id, name, arguments, started, t0, False, "transport_error", text, None, True)
            try:
                result = await client.call_tool(name, arguments, meta=meta)
            except TimeoutError:
                return self._timed_out(call_id, name, arguments, started, t0)
            except Exception as e:  # transport failures surface as httpx/httpx2/anyio errors, often grouped
                if isinstance(e, MCPError) and e.error.code == REQUEST_TIMEOUT:
                    return self._timed_out(call_id, name, arguments, started, t0)
                if not _is_transport_failure(e):
                    return self._finish(call_id, name, arguments, started, t0, False, "tool_error", str(e), None, True)
                logger.debug("%s: call %s found the transport broken: %s", self.worker_id, call_id,
                             describe(root_cause(e)))
                self._report_broken(used, e)
                if not retried:
                    # The call got no answer because the session broke. The gateway's tools are read-only
                    # retrieval, so sending it again (same call id) on the reopened session is safe.
                    retried = True
                    continue
                text = f"could not reach the gateway at {self.url}: {describe(root_cause(e))}"
                return self._finish(call_id, name, arguments, started, t0, False, "transport_error", text, None, True)
            return self._from_result(call_id, name, arguments, started, t0, result)

    def _timed_out(
        self, call_id: str, name: str, arguments: dict[str, Any], started: float, t0: float
    ) -> tuple[ToolResult, ToolCallRecord]:
        text = f"tool {name} timed out after {self.call_timeout_s:.0f} s"
        return self._finish(call_id, name, arguments, started, t0, False, "timeout", text, None, True)

    def _from_result(
        self, call_id: str, name: str, arguments: dict[str, Any], started: float, t0: float, result: CallToolResult
    ) -> tuple[ToolResult, ToolCallRecord]:
        ok, outcome, error, _ = classify_result(result)
        text = error if error is not None else result_text(result)
        structured = result.structured_content if ok else None
        return self._finish(call_id, name, arguments, started, t0, ok, outcome, text, structured, True)

    @staticmethod
    def _finish(
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        started: float,
        t0: float,
        ok: bool,
        outcome: Outcome,
        text: str,
        structured: dict[str, Any] | None,
        reached: bool,
    ) -> tuple[ToolResult, ToolCallRecord]:
        hits = [r for r in (structured or {}).get("results", []) if isinstance(r, dict)]
        record = ToolCallRecord(
            call_id=call_id,
            name=name,
            arguments=dict(arguments),
            ok=ok,
            outcome=outcome,
            error=None if ok else text,
            started=started,
            latency_ms=(time.perf_counter() - t0) * 1000.0,
            result_ids=[str(r.get("id")) for r in hits],
            result_doc_ids=[str(r.get("doc_id", r.get("id"))) for r in hits],
            reached_gateway=reached,
        )
        return ToolResult(ok=ok, text=text, structured=structured), record
