"""HttpMCPEnv: the tool surface of one gateway file, over one open MCP session.

An environment owns which tools exist, their schemas, the system prompt and how a tool
is called; the agent (policy) decides what to call. One env lives in each rollout worker
and keeps a single MCP session open for all of that worker's tasks (opening one costs
~40 ms, a call on an open session a few ms).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Tool

from envs.records import Outcome, ToolCallRecord, ToolResult
from envs.schema import mcp_tool_to_function
from rollout.errors import GatewayError
from rollout.gateway.auth import auth_headers, resolve_token
from rollout.gateway.config import GatewayFile, load_gateway_file
from rollout.gateway.server import META_GROUP
from rollout.gateway.sessions import mcp_client
from rollout.gateway.stats import META_CALL_ID, META_TASK_ID, META_WORKER_ID
from rollout.gateway.toolsets import TOOLSETS_GROUP

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
    ):
        """`url` ends with /mcp (streamable HTTP) or /sse (SSE). `auth_token` (default
        `$ROLLOUT_GATEWAY_TOKEN`) goes as `Authorization: Bearer ...` with `headers` on every request."""
        self.url = url
        self.headers = {**(headers or {}), **auth_headers(resolve_token(auth_token))}
        self.worker_id = worker_id
        self.call_timeout_s = call_timeout_s
        self.gateway_config = self._load_gateway_config(gateway_config_path)
        self.system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT
        self.tools: list[Tool] = []
        self.tool_specs: list[dict[str, Any]] = []
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

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
        """Open the MCP session and list the tools this environment offers."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._hold_session(ready), name=f"mcp-session-{self.worker_id}")
        await ready

    async def _hold_session(self, ready: asyncio.Future[None]) -> None:
        # The SDK's session lives in anyio cancel scopes that must be entered and exited by the
        # same task; tasks of a worker come and go, so one owner task holds the session open.
        try:
            async with mcp_client(self.url, headers=self.headers, read_timeout_s=self.call_timeout_s) as client:
                listed = (await client.list_tools()).tools
                allowed = set(self.allowed_groups)
                self.tools = [t for t in listed if (t.meta or {}).get(META_GROUP) in allowed]
                self.tool_specs = [mcp_tool_to_function(t) for t in self.tools]
                self._client = client
                logger.debug("%s offers %s", self.worker_id, [t.name for t in self.tools])
                ready.set_result(None)
                await self._stop.wait()
        except Exception as e:  # the SDK raises transport errors inside exception groups
            if ready.done():
                logger.warning("MCP session of %s ended: %s", self.worker_id, e)
            else:
                ready.set_exception(
                    GatewayError(
                        f"could not open an MCP session at {self.url} ({type(e).__name__}). Is the gateway "
                        "running? Start one with: python -m rollout.gateway --config GATEWAY_FILE --port PORT. "
                        "If it requires a token, set gateway.auth_token= or ROLLOUT_GATEWAY_TOKEN"
                    )
                )
        finally:
            self._client = None

    async def close(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            self._stop.set()
            await owner

    def for_task(self, task_id: str) -> TaskSession:
        """The tool surface one task sees; it records that task's calls."""
        return TaskSession(self, task_id)

    async def call(self, name: str, arguments: dict[str, Any], task_id: str) -> tuple[ToolResult, ToolCallRecord]:
        """Call a tool for a task; failures become error results, never exceptions."""
        call_id = uuid.uuid4().hex
        started = time.time()
        t0 = time.perf_counter()
        if name not in {t.name for t in self.tools}:
            offered = ", ".join(t.name for t in self.tools) or "none"
            text = f"Unknown tool {name!r}: this environment offers {offered}."
            return self._finish(call_id, name, arguments, started, t0, False, "unknown_tool", text, None, False)
        if self._client is None:
            raise RuntimeError("environment is not started: use `async with env:` or `await env.start()`")
        meta = {META_CALL_ID: call_id, META_TASK_ID: task_id, META_WORKER_ID: self.worker_id}
        try:
            result = await self._client.call_tool(name, arguments, meta=meta)
        except TimeoutError:
            text = f"tool {name} timed out after {self.call_timeout_s:.0f} s"
            return self._finish(call_id, name, arguments, started, t0, False, "timeout", text, None, True)
        except MCPError as e:
            return self._finish(call_id, name, arguments, started, t0, False, "tool_error", str(e), None, True)
        except Exception as e:  # transport failures surface as httpx/httpx2/anyio errors, often grouped
            text = f"could not reach the gateway at {self.url}: {e}"
            return self._finish(call_id, name, arguments, started, t0, False, "transport_error", text, None, True)
        return self._from_result(call_id, name, arguments, started, t0, result)

    def _from_result(
        self, call_id: str, name: str, arguments: dict[str, Any], started: float, t0: float, result: CallToolResult
    ) -> tuple[ToolResult, ToolCallRecord]:
        text = "\n".join(getattr(c, "text", "") for c in result.content).strip()
        if result.is_error:
            outcome: Outcome = "invalid_arguments" if "validation error" in text else "tool_error"
            return self._finish(call_id, name, arguments, started, t0, False, outcome, text, None, True)
        return self._finish(call_id, name, arguments, started, t0, True, "ok", text, result.structured_content, True)

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


class TaskSession:
    """One task's view of an environment (implements `rollout.agents.base.TaskTools`)."""

    def __init__(self, env: HttpMCPEnv, task_id: str):
        self.env = env
        self.task_id = task_id
        self.calls: list[ToolCallRecord] = []
        config = env.gateway_config
        self.active_toolsets: list[str] | None = config.active_groups() if config.dynamic_toolsets else None
        """Tool sets active for this task (dynamic gateway files); None when every tool is offered.
        Starts from the file's defaults and follows the results of the tool-set tools."""

    @property
    def system_prompt(self) -> str:
        return self.env.system_prompt

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        if self.active_toolsets is None:
            return self.env.tool_specs
        return self.env.tool_specs_for(self.active_toolsets)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        result, record = await self.env.call(name, arguments, self.task_id)
        self.calls.append(record)
        if self.active_toolsets is not None and result.ok and self.env.group_of(name) == TOOLSETS_GROUP:
            active = (result.structured or {}).get("active_toolsets")
            if isinstance(active, list):
                known = set(self.env.gateway_config.tool_groups())
                self.active_toolsets = [str(a) for a in active if str(a) in known]
        return result
