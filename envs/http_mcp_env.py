"""HttpMCPEnv: the tool surface of one gateway file, over one open MCP session.

An environment owns which tools exist, their schemas, the system prompt and how a tool
is called; the agent (policy) decides what to call. One env lives in each rollout worker
and keeps a single MCP session open for all of that worker's tasks (opening one costs
~40 ms, a call on an open session a few ms).

The session survives a gateway restart: when it breaks (the gateway died, or a call found the
transport gone), its `McpSession` reopens it with exponential backoff and jitter for up to
`reconnect_timeout_s`, this env checks the gateway still offers the same tools, and calls waiting
for it go on; a call the break cut off is sent again once on the new session.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from envs.task_session import TaskSession
from rollout.accounting import CallAccounting
from rollout.errors import GatewayError
from rollout.events import EventLog
from rollout.gateway_file import GatewayFile, load_gateway_file
from rollout.mcp_client.schema import mcp_tool_to_function
from rollout.mcp_client.session import McpSession
from rollout.mcp_client.transport import describe, is_transport_failure, root_cause, trust_tool_results
from rollout.records import ToolCallRecord, ToolResult
from rollout.wire import (
    META_ACCOUNTING,
    META_ATTEMPT,
    META_CALL_ID,
    META_GROUP,
    META_RUN_ID,
    META_STEP,
    META_TASK_ID,
    META_TEXT,
    META_TRAFFIC,
    META_WORKER_ID,
    TEXT_FROM_STRUCTURED,
    TOOLSETS_GROUP,
    Outcome,
    auth_headers,
    classify_result,
    degraded_tools,
    resolve_token,
    result_ids,
    result_text,
)

if TYPE_CHECKING:
    # For annotations only: the SDK is imported when a session opens (see rollout.mcp_client.session's docstring).
    from mcp.client.client import Client
    from mcp_types import CallToolResult, Tool

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions using the tools provided. Call a tool when you need information, "
    "then reply with a short final answer only."
)


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
        traffic: str | None = None,
    ):
        """`url` ends with /mcp (streamable HTTP) or /sse (SSE). `auth_token` (default
        `$ROLLOUT_GATEWAY_TOKEN`) goes as `Authorization: Bearer ...` with `headers` on every request.
        When the session breaks, it is reopened for up to `reconnect_timeout_s`; calls wait for that.
        `run_id` goes with every call, so the gateway keeps per-task state apart between runs; `traffic`
        (`rollout.wire.TRAFFIC_TRAIN` for a trainer) too, so the gateway's ledger marks the calls as such."""
        self.run_id = run_id
        self.traffic = traffic
        self.url = url
        self.headers = {**(headers or {}), **auth_headers(resolve_token(auth_token))}
        self.worker_id = worker_id
        self.call_timeout_s = call_timeout_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self.gateway_config = self._load_gateway_config(gateway_config_path)
        self.system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT
        self.tools: list[Tool] = []
        self.tool_specs: list[dict[str, Any]] = []
        self._session = McpSession(
            url, name=worker_id, peer=f"the gateway at {url}", label="environment", headers=self.headers,
            read_timeout_s=call_timeout_s, open_timeout_s=call_timeout_s, reconnect_timeout_s=reconnect_timeout_s,
            on_open=self._list_tools, log=logger,
        )

    @property
    def reconnects(self) -> int:
        """Sessions reopened after a break (for logs and tests)."""
        return self._session.reconnects

    def _load_gateway_config(self, config_path: str | Path) -> GatewayFile:
        """Read the gateway file; subclasses narrow it (see `HttpMCPRagEnv`)."""
        return load_gateway_file(config_path)

    @property
    def allowed_groups(self) -> list[str]:
        groups = self.gateway_config.tool_groups()
        return [*groups, TOOLSETS_GROUP] if self.gateway_config.dynamic_toolsets else groups

    def tool_specs_for(self, active_groups: Iterable[str]) -> list[dict[str, Any]]:
        """Specs of the tools in active groups, plus tools outside every tool set of the file (the
        tool-set management tools, and groups of other resource types than `rag`, which are always on)."""
        sets, active = set(self.gateway_config.toolset_groups()), set(active_groups)
        return [
            spec
            for tool, spec in zip(self.tools, self.tool_specs, strict=True)
            if (group := (tool.meta or {}).get(META_GROUP)) not in sets or group in active
        ]

    @property
    def degraded_tools(self) -> dict[str, str]:
        """Name → reason of the offered tools the gateway serves degraded (`rollout.wire.META_DEGRADED`)."""
        return degraded_tools(self.tools)

    def group_of(self, tool_name: str) -> str | None:
        """The group a listed tool belongs to."""
        return next(((t.meta or {}).get(META_GROUP) for t in self.tools if t.name == tool_name), None)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the MCP session and list the tools this environment offers (raises GatewayError if it cannot)."""
        try:
            await self._session.open()
        except GatewayError:
            raise
        except Exception as e:
            raise GatewayError(
                f"could not open an MCP session at {self.url} ({type(e).__name__}). Is the gateway "
                "running? Start one with: python -m rollout.gateway --config GATEWAY_FILE --port PORT. "
                "If it requires a token, set gateway.auth_token= or ROLLOUT_GATEWAY_TOKEN"
            ) from e

    async def close(self) -> None:
        """End the session; prompt even while reconnecting."""
        await self._session.close()

    def offered(self, listed: Iterable[Tool]) -> tuple[list[Tool], list[dict[str, Any]]]:
        """The tools of a gateway's tools/list that this environment offers (those of its gateway file's groups), and
        their function specs as an agent is shown them."""
        allowed = set(self.allowed_groups)
        tools = [t for t in listed if (t.meta or {}).get(META_GROUP) in allowed]
        return tools, [mcp_tool_to_function(t) for t in tools]

    async def _list_tools(self, client: Client, reopened: bool) -> None:
        """The session's `on_open` hook: adopt the listed tools, or refuse a session offering other ones."""
        listed = (await client.list_tools()).tools
        trust_tool_results(client)
        tools, specs = self.offered(listed)
        if not reopened:
            self.tools, self.tool_specs = tools, specs
            logger.debug("%s offers %s", self.worker_id, [t.name for t in self.tools])
            return
        if specs != self.tool_specs:
            before, after = [t.name for t in self.tools], [t.name for t in tools]
            what = f"tools {before} became {after}" if before != after else f"the schemas of {after} changed"
            raise GatewayError(
                f"the gateway at {self.url} came back with other tools: {what}. The run's tool fingerprint "
                "no longer matches; restart the gateway with the same gateway file and arguments"
            )

    # --- calls ------------------------------------------------------------------------------------

    def for_task(self, task_id: str, events: EventLog | None = None, attempt: int = 1) -> TaskSession:
        """The tool surface one attempt at a task sees; it records that attempt's calls (and emits them to `events`)."""
        return TaskSession(self, task_id, events, attempt)

    async def call(
        self, name: str, arguments: dict[str, Any], task_id: str, call_id: str | None = None, attempt: int = 1,
        step: int | None = None,
    ) -> tuple[ToolResult, ToolCallRecord]:
        """Call a tool for a task; failures become error results, never exceptions. `step` is a trainer's step
        number, kept in the gateway's ledger.

        While the session is being reopened the call waits for it (up to `reconnect_timeout_s`)."""
        call_id = call_id or uuid.uuid4().hex
        started = time.time()
        t0 = time.perf_counter()
        if name not in {t.name for t in self.tools}:
            offered = ", ".join(t.name for t in self.tools) or "none"
            text = f"Unknown tool {name!r}: this environment offers {offered}."
            return self._finish(call_id, name, arguments, started, t0, False, "unknown_tool", text, None, False)
        if not self._session.started:
            raise RuntimeError("environment is not started: use `async with env:` or `await env.start()`")
        # META_TEXT: the gateway may send a typed result once, as structured content; `result_text` makes the text.
        meta = {META_CALL_ID: call_id, META_TASK_ID: task_id, META_WORKER_ID: self.worker_id, META_ATTEMPT: attempt,
                META_RUN_ID: self.run_id, META_TEXT: TEXT_FROM_STRUCTURED}
        if self.traffic is not None:
            meta[META_TRAFFIC] = self.traffic
        if step is not None:
            meta[META_STEP] = step
        used, retried = 0, False
        while True:
            client, used, why = await self._session.acquire(used, self.reconnect_timeout_s)
            if client is None:
                text = f"could not reach the gateway: {why}"
                return self._finish(call_id, name, arguments, started, t0, False, "transport_error", text, None, True)
            try:
                result = await client.call_tool(name, arguments, meta=meta)
            except TimeoutError:
                return self._timed_out(call_id, name, arguments, started, t0)
            except Exception as e:  # transport failures surface as httpx/httpx2/anyio errors, often grouped
                if _is_request_timeout(e):
                    return self._timed_out(call_id, name, arguments, started, t0)
                if not is_transport_failure(e):
                    return self._finish(call_id, name, arguments, started, t0, False, "tool_error", str(e), None, True)
                logger.debug("%s: call %s found the transport broken: %s", self.worker_id, call_id,
                             describe(root_cause(e)))
                self._session.report_broken(used, e)
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
        cost = CallAccounting.from_json((result.meta or {}).get(META_ACCOUNTING))
        return self._finish(call_id, name, arguments, started, t0, ok, outcome, text, structured, True, cost)

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
        accounting: CallAccounting | None = None,
    ) -> tuple[ToolResult, ToolCallRecord]:
        ids, doc_ids = result_ids(structured)
        record = ToolCallRecord(
            call_id=call_id,
            name=name,
            arguments=dict(arguments),
            ok=ok,
            outcome=outcome,
            error=None if ok else text,
            started=started,
            latency_ms=(time.perf_counter() - t0) * 1000.0,
            result_ids=ids,
            result_doc_ids=doc_ids,
            reached_gateway=reached,
            accounting=accounting,
        )
        return ToolResult(ok=ok, text=text, structured=structured), record


def _is_request_timeout(e: BaseException) -> bool:
    """True for the SDK's error for a request that got no answer within the client's read timeout."""
    from mcp.shared.exceptions import MCPError  # the SDK only once a call failed (see rollout.mcp_client.session)
    from mcp_types import REQUEST_TIMEOUT

    return isinstance(e, MCPError) and e.error.code == REQUEST_TIMEOUT
