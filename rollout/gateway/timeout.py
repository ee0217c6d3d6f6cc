"""Gateway-side per-call timeout: a tools/call over the limit answers with an error result.

Installed as an `mcp` server extension that wraps `tools/call` at the handler layer, so its
error result is serialized like any tool result and `ToolStatsMiddleware` (outside it) records
the call with outcome `timeout`. The result carries `_meta["rollout/outcome"] = "timeout"`; the
HTTP proxy answers it with 504.

The call runs in its own task, so the answer leaves on time even when the tool is a sync
function on a worker thread (a thread cannot be interrupted: it finishes in the background and
its result is dropped). An async tool, e.g. a call forwarded to an upstream MCP server, is
cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp_types import CallToolRequestParams, CallToolResult

from rollout.gateway.upstream import error_result

logger = logging.getLogger(__name__)


class CallTimeout(Extension):
    """Answer a tools/call that runs longer than `timeout_s` with an `is_error` result."""

    identifier = "dev.rollout/tool-timeout"

    def __init__(self, timeout_s: float):
        if not timeout_s > 0:
            raise ValueError(f"tool timeout must be a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)

    def settings(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s}

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        task = asyncio.ensure_future(call_next(ctx))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except TimeoutError:
            logger.debug("tool %s timed out after %g s", params.name, self.timeout_s)
            return timeout_result(params.name, self.timeout_s)
        finally:
            if not task.done():
                task.cancel()
                task.add_done_callback(_drop_result)


def timeout_result(tool: str, timeout_s: float) -> CallToolResult:
    """The error result of a call the gateway gave up on."""
    text = (
        f"Tool {tool} timed out after {timeout_s:g} s on the gateway (--tool-timeout-s). "
        "Try a narrower request, or raise the gateway's limit."
    )
    return error_result(text, outcome="timeout")


def _drop_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("a timed-out tool call failed afterwards: %s", task.exception())
