"""MCP client sessions the gateway keeps open: to upstream servers and to itself (the HTTP proxy).

The SDK's `Client` lives in anyio cancel scopes that must be entered and exited by the same
task, while calls come from many request tasks. `HeldClient` gives the session its own owner
task: `open()` returns once the session is up, any task may call through it, and `close()` ends
it from anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from mcp.client.client import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared._httpx_utils import create_mcp_http_client

logger = logging.getLogger(__name__)


def is_sse_url(url: str) -> bool:
    """True for an SSE endpoint (the path ends with `/sse`); streamable HTTP otherwise."""
    return urlsplit(url).path.rstrip("/").endswith("/sse")


@contextlib.asynccontextmanager
async def _streamable_http_with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def mcp_client(url: str, *, headers: dict[str, str] | None = None, read_timeout_s: float | None = None) -> Client:
    """A `Client` for an MCP URL: SSE when it ends with `/sse`, else streamable HTTP; `headers` go with every request."""
    if is_sse_url(url):
        return Client(sse_client(url, headers=headers), read_timeout_seconds=read_timeout_s)
    if headers:
        return Client(_streamable_http_with_headers(url, headers), read_timeout_seconds=read_timeout_s)
    return Client(url, read_timeout_seconds=read_timeout_s)


class HeldClient:
    """One MCP client session held open by an owner task; `client` is None until opened or once it dropped."""

    def __init__(self, target: str | MCPServer, *, headers: dict[str, str] | None = None,
                 read_timeout_s: float | None = None, name: str = "mcp-session"):
        self.target = target
        self.headers = headers
        self.read_timeout_s = read_timeout_s
        self.name = name
        self.client: Client | None = None
        self.error: BaseException | None = None
        """Why the session ended or failed to open, for error messages."""
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None

    def _make_client(self) -> Client:
        if isinstance(self.target, MCPServer):
            return Client(self.target, read_timeout_seconds=self.read_timeout_s)
        return mcp_client(self.target, headers=self.headers, read_timeout_s=self.read_timeout_s)

    async def open(self, timeout_s: float | None = None) -> Client:
        """Open the session; raises what opening it raised (or TimeoutError after `timeout_s`)."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self.error = None
        self._owner = asyncio.create_task(self._hold(ready), name=self.name)
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except BaseException:
            await self.close()
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the caller gets it raised (or the timeout)
            raise

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        try:
            async with self._make_client() as client:
                self.client = client
                ready.set_result(client)
                await self._stop.wait()
        except Exception as e:  # the SDK raises transport failures inside exception groups
            self.error = root_cause(e)
            if not ready.done():
                ready.set_exception(self.error)
            else:
                logger.warning("MCP session %s ended: %s", self.name, describe(self.error))
        finally:
            self.client = None

    async def close(self) -> None:
        """End the session (if any) and wait for its owner task."""
        owner, self._owner = self._owner, None
        connecting = self.client is None
        self.client = None
        if owner is None:
            return
        if connecting:
            owner.cancel()  # still opening (a timeout) or already ended: nothing to close cleanly
        self._stop.set()
        try:
            await asyncio.wait_for(owner, 10.0)
        except (TimeoutError, asyncio.CancelledError):
            owner.cancel()
        except Exception:  # already recorded in self.error by the owner
            pass


def root_cause(e: BaseException) -> BaseException:
    """The first leaf of nested exception groups: the error worth showing."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def describe(e: BaseException | None) -> str:
    """`Type: message` of an error, one line."""
    if e is None:
        return "unknown error"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
