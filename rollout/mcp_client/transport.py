"""Opening MCP clients (streamable HTTP, SSE or in-process) and reading the errors their sessions raise.

The MCP SDK is imported inside the functions that need it, never at module import: `import mcp`
pulls the SDK's server side and a web server (uvicorn), about a second, which Ray workers and
anything that needs only the env's types and constants should not pay.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from mcp.client.client import Client

_SESSION_GONE = ("Session not found", "Session terminated")
"""Errors a streamable-HTTP server answers for a session id it does not know (it restarted)."""

_E = TypeVar("_E", bound=BaseException)


def root_cause(e: BaseException) -> BaseException:
    """The first leaf of nested exception groups: the error worth showing."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def find_error(e: BaseException, kind: type[_E]) -> _E | None:
    """`e`, or the first exception of type `kind` in the exception groups it nests."""
    if isinstance(e, kind):
        return e
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            if (found := find_error(inner, kind)) is not None:
                return found
    return None


def describe(e: BaseException | None) -> str:
    """`Type: message` of an error, one line."""
    if e is None:
        return "unknown error"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def is_transport_failure(e: BaseException) -> bool:
    """True when a call never got an answer because the session's transport broke."""
    from mcp.shared.exceptions import MCPError  # the SDK only once a call failed (see the module docstring)
    from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

    e = root_cause(e)
    if isinstance(e, MCPError):
        if e.error.code == CONNECTION_CLOSED:
            return True
        return e.error.code == INVALID_REQUEST and any(s in e.error.message for s in _SESSION_GONE)
    # The SDK raises RuntimeError/ValueError (pydantic) for an answer it received but rejects (say, structured
    # content that fails the output schema): reopening the session would not change that answer.
    # Everything else is the transport: httpx/httpx2 errors, anyio's closed or broken streams, OSError.
    return not isinstance(e, (RuntimeError, ValueError))


class _OneLineStreamErrors(logging.Filter):
    """The SDK's transports log a full traceback at ERROR when their stream breaks under them.

    A broken stream is a lost session, which `rollout.mcp_client.session.McpSession` reports and repairs
    itself, so the SDK's record becomes one WARNING line naming the exception: no traceback wall
    on the console of a run whose gateway restarts.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg, record.args = f"{record.getMessage()}: {describe(root_cause(record.exc_info[1]))}", None
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


for _transport in ("mcp.client.sse", "mcp.client.streamable_http"):
    logging.getLogger(_transport).addFilter(_OneLineStreamErrors())


def trust_tool_results(client: Client) -> None:
    """Have `client` take tool results as the gateway sends them, without validating their structured content
    against the tool's output schema again (a jsonschema pass per call, about a quarter of a call's CPU here).

    For a session to the gateway only: a local tool's result was built from, or validated against, that
    schema's model on the gateway, and an upstream tool's by the gateway's own session to the upstream
    server, which validates as the SDK does. The SDK has no switch for this; the session's check is the seam.
    """

    async def trusted(name: str, result: Any) -> None:
        return None

    client.session.validate_tool_result = trusted  # type: ignore[method-assign]


def is_sse_url(url: str) -> bool:
    """True for an SSE endpoint (the path ends with `/sse`); streamable HTTP otherwise."""
    return urlsplit(url).path.rstrip("/").endswith("/sse")


@contextlib.asynccontextmanager
async def _streamable_http_with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers) as http, streamable_http_client(url, http_client=http) as streams:
        yield streams


def mcp_client(target: Any, *, headers: dict[str, str] | None = None, read_timeout_s: float | None = None) -> Client:
    """A `Client` for an MCP URL (SSE when it ends with `/sse`, else streamable HTTP; `headers` go with every
    request), or for an in-process server when `target` is not a string."""
    from mcp.client.client import Client  # the SDK only when a session opens (see the module docstring)

    if not isinstance(target, str):
        return Client(target, read_timeout_seconds=read_timeout_s)
    if is_sse_url(target):
        from mcp.client.sse import sse_client

        return Client(sse_client(target, headers=headers), read_timeout_seconds=read_timeout_s)
    if headers:
        return Client(_streamable_http_with_headers(target, headers), read_timeout_seconds=read_timeout_s)
    return Client(target, read_timeout_seconds=read_timeout_s)
