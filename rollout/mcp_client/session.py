"""McpSession: one MCP client session held open by an owner task, and reopened with backoff when it breaks.

The SDK's `Client` lives in anyio cancel scopes that must be entered and exited by the same task,
while calls come from many tasks (a worker's tasks, the gateway's request handlers). So one owner
task opens the session, holds it, and when it breaks (the server died, or a call found the transport
gone) reopens it with exponential backoff and jitter. Each opened session has a generation number:
however many calls find the same session broken, it is reported (and reopened) once.

Used by the environments (`HttpMCPEnv`, calls wait for a reopened session), the gateway's upstream
tool sets (calls answer `upstream_unavailable` at once while it is down) and its HTTP proxy (an
in-process session, which does not break). The SDK itself is imported only when a session opens
(see `rollout.mcp_client.transport`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio

from rollout.errors import GatewayError
from rollout.mcp_client.transport import describe, find_error, mcp_client, root_cause

if TYPE_CHECKING:
    from mcp.client.client import Client

logger = logging.getLogger(__name__)

RECONNECT_BASE_S = 0.2
"""First backoff delay after a failed reconnection attempt; it doubles per attempt..."""
RECONNECT_CAP_S = 5.0
"""...up to this; each delay is drawn from [delay/2, delay] (jitter), so workers do not reconnect in lockstep."""

State = Literal["new", "up", "reconnecting", "down", "failed", "closed"]


def backoff_delay(attempt: int, cap_s: float = RECONNECT_CAP_S) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based) to reach a server: see `RECONNECT_BASE_S`."""
    return min(cap_s, RECONNECT_BASE_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
"""new: not opened; up: a session is open; reconnecting: it broke, the owner is reopening it;
down: reconnecting for longer than `reconnect_timeout_s` (calls fail at once, the owner keeps
trying); failed: the `on_open` hook refused a reopened session (final); closed: `close()` was called."""

OnOpen = Callable[["Client", bool], Awaitable[None]]
"""Run on each session opened, before any call can use it, with (client, reopened). A `GatewayError` it
raises refuses the session: to the opener on the first open, as the final `failed` state on a reopen.
Any other error is one failed attempt."""


class McpSession:
    """One MCP client session held open by an owner task; any task may call through `client`."""

    def __init__(
        self,
        target: Any,
        *,
        name: str = "mcp-session",
        peer: str | None = None,
        label: str = "session",
        headers: dict[str, str] | None = None,
        read_timeout_s: float | None = None,
        open_timeout_s: float = 10.0,
        reconnect_timeout_s: float = 120.0,
        backoff_cap_s: float = RECONNECT_CAP_S,
        on_open: OnOpen | None = None,
        log: logging.Logger = logger,
    ):
        """`target` is an MCP URL or an in-process server. `name` says who holds the session in log lines,
        `peer` what it is connected to (default: the URL), `label` what closing it ends ("environment").
        A reopening attempt gets `open_timeout_s` at most; past `reconnect_timeout_s` of reopening the
        session is `down` (and the owner keeps trying, every `backoff_cap_s` at most)."""
        self.target = target
        self.url = target if isinstance(target, str) else f"the in-process server {getattr(target, 'name', '')}"
        self.name = name
        self.peer = peer or self.url
        self.label = label
        self.headers = headers
        self.read_timeout_s = read_timeout_s
        self.open_timeout_s = open_timeout_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self.backoff_cap_s = backoff_cap_s
        self.on_open = on_open
        self.log = log
        self.reconnects = 0
        """Sessions reopened after a break (for logs and tests)."""
        self.error: BaseException | None = None
        """Why the session last broke or failed to open, for error messages."""
        self.generation = 0
        """Counts sessions opened; a call remembers the one it used, so a stale failure reports nothing."""
        self._client: Client | None = None
        self._state: State = "new"
        self._changed = asyncio.Event()
        """Set (and replaced) whenever `_state` changes; calls waiting for a session wait on it."""
        self._failure = ""
        """Why calls cannot be sent (states down, failed, closed)."""
        self._broke_at: float | None = None
        self._break_reason: str | None = None
        """What a call saw when it found the session broken, for the log line."""
        self._wake = asyncio.Event()
        """Wakes the owner task out of holding a session (a call found it broken, or `close()`) or out of a backoff."""
        self._closing = False
        self._owner: asyncio.Task[None] | None = None

    @property
    def state(self) -> State:
        return self._state

    @property
    def started(self) -> bool:
        """True from `open()` until `close()`."""
        return self._owner is not None

    @property
    def client(self) -> Client | None:
        """The open session's client; None while there is none."""
        return self._client if self._state == "up" else None

    def current(self) -> tuple[Client | None, int]:
        """The open session's client and generation; `(None, 0)` while there is none."""
        client = self.client
        return (client, self.generation) if client is not None else (None, 0)

    async def open(self, timeout_s: float | None = None) -> Client:
        """Start the owner task and wait for the first session. What opening it raised is raised here (the
        root cause, a `GatewayError` from `on_open`, or TimeoutError after `timeout_s`); nothing is retried."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._closing = False
        self._wake = asyncio.Event()
        self.error = None
        self._owner = asyncio.create_task(self._hold(ready, timeout_s), name=f"mcp-session {self.name}")
        try:
            return await asyncio.shield(ready)
        except BaseException:
            if not ready.done() or ready.cancelled() or ready.exception() is not None:
                await self._abandon()
                if ready.done() and not ready.cancelled():
                    ready.exception()  # retrieved: the owner's "closed before it opened" when the opener was cancelled
            raise

    async def _abandon(self) -> None:
        """The first open failed or was cancelled: end the owner; the session may be opened again."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.cancel()
            await asyncio.wait({owner}, timeout=5.0)

    # --- the owner task -------------------------------------------------------------------------

    async def _hold(self, ready: asyncio.Future[Client], first_timeout_s: float | None) -> None:
        attempt = 0
        try:
            while not self._closing:
                opened = self.generation
                error: BaseException | None = None
                try:
                    await self._open_and_hold(ready, first_timeout_s)
                except Exception as e:  # the SDK raises transport errors, and on_open's, inside exception groups
                    refused = find_error(e, GatewayError)
                    if refused is not None and ready.done():
                        self._set_state("failed", str(refused))
                        self.log.error("%s: %s", self.name, refused)
                        return
                    error = self.error = refused or root_cause(e)
                if self._closing:
                    return
                if not ready.done():
                    ready.set_exception(error or ConnectionError(f"the MCP session to {self.url} ended at once"))
                    return
                if self.generation != opened:
                    # A session was up and broke (leaving it may raise as well): reopen it at once, then back off.
                    if error is None and self._break_reason is None:
                        self.error = ConnectionError(f"{self.peer} ended the MCP session")
                    reason = self._break_reason or (describe(error) if error is not None else "it ended")
                    self.log.warning("%s lost its MCP session to %s (%s); reconnecting", self.name, self.url, reason)
                    attempt = 0
                    continue
                attempt += 1
                await self._after_failed_attempt(attempt, error or ConnectionError("the session ended at once"))
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(GatewayError(f"{self.label} closed before its MCP session at {self.url} opened"))
            if self._closing:
                self._set_state("closed", f"{self.label} is closed")

    async def _open_and_hold(self, ready: asyncio.Future[Client], first_timeout_s: float | None) -> None:
        """Open a session, run `on_open`, and hold it until it breaks or `close()`; returns when it ended."""
        first = not ready.done()
        # A server that accepts the connection and never answers must not eat the whole reconnect budget.
        limit = first_timeout_s if first else max(1.0, min(self.open_timeout_s, self._budget_left()))
        with anyio.CancelScope() as opening:
            if limit is not None:
                opening.deadline = anyio.current_time() + limit
            async with mcp_client(self.target, headers=self.headers, read_timeout_s=self.read_timeout_s) as client:
                if self.on_open is not None:
                    await self.on_open(client, not first)
                opening.deadline = math.inf
                self._wake.clear()
                self._client = client
                self.generation += 1
                if first:
                    ready.set_result(client)
                else:
                    self.reconnects += 1
                    self.log.warning("%s reconnected to %s after %.1f s", self.name, self.peer,
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
            raise TimeoutError(f"no answer to opening the MCP session within {limit:.0f} s")

    def _session_lost(self, reason: str | None = None) -> None:
        """No call may use the session any more; the owner reopens it (and logs `reason`)."""
        self._client = None
        if self._state == "up":
            self._broke_at = time.monotonic()
            self._break_reason = reason
            self._set_state("reconnecting")

    async def _after_failed_attempt(self, attempt: int, error: BaseException) -> None:
        """Log, declare the session down once the budget is spent, and sleep the backoff delay."""
        self.log.debug("%s: reconnection attempt %d to %s failed: %s", self.name, attempt, self.url, describe(error))
        if self._broke_at is None:
            self._broke_at = time.monotonic()
        if self._state == "reconnecting" and self._budget_left() <= 0:
            message = (
                f"{self.peer} is down: no MCP session for {self.reconnect_timeout_s:.0f} s "
                f"(last error: {describe(error)}); still retrying every {self.backoff_cap_s:.0f} s"
            )
            self.log.error("%s: %s", self.name, message)
            self._set_state("down", message)
        delay = backoff_delay(attempt, self.backoff_cap_s)
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

    # --- for callers ------------------------------------------------------------------------------

    def report_broken(self, generation: int, error: BaseException) -> None:
        """A call on session `generation` found the transport gone: have the owner reopen it (once, however
        many calls report it)."""
        if self._state == "up" and generation == self.generation and not self._closing:
            self.error = root_cause(error)
            self._session_lost(describe(self.error))
            self._wake.set()

    async def acquire(self, after: int, wait_s: float) -> tuple[Client | None, int, str]:
        """A client of a session newer than generation `after` and its generation, waiting up to `wait_s`
        while reconnecting; `(None, 0, why)` when there is none to be had."""
        deadline = time.monotonic() + wait_s
        while True:
            client = self.client
            if client is not None and self.generation > after:
                return client, self.generation, ""
            if self._state in ("down", "failed", "closed"):
                return None, 0, self._failure
            left = deadline - time.monotonic()
            if left <= 0:
                return None, 0, f"{self.peer} is down: no MCP session after waiting {wait_s:.0f} s"
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
        self._set_state("closed", f"{self.label} is closed")
