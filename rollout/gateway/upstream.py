"""Upstream MCP servers: another server's tools served by the gateway as one more tool set.

A gateway-file module

    {"resource_type": "rag", "source": "mcp", "name": "wiki",
     "url": "http://127.0.0.1:9000/mcp", "tools": ["search", "fetch"],
     "fixed_params": {"top_k": 3}, "active": false, "description": "Search the wiki."}

makes the gateway open one session to that server when it starts, list its tools (all of them,
or the `tools` subset) with the upstream's own input schemas, and forward every call to them
over that session. The tools carry `_meta` `rollout/group` = the module's `name` and
`rollout/source` = `mcp`, so environments and tool sets treat them like local groups, and
`ToolStatsMiddleware` records their calls like any other.

The module describes its one tool set as a group object does a local group: `fixed_params` are
checked against the upstream tools' schemas at startup (`tool_params.check_pins`), hidden from the
schemas this gateway lists, and put into every forwarded call whatever the client sent; `active`
and `description` are the set's under `dynamic_toolsets` (a `rag` module's only: see
`rollout.gateway_file.TOOLSET_RESOURCE_TYPE`).

Failures:
- unreachable at startup, or a `tools` entry the upstream does not have: `GatewayError` naming
  the URL, and the gateway does not start; a `fixed_params` entry none of its tools takes, or
  whose value their schema rejects: `ConfigError` naming the set and the parameter, likewise;
- a tool whose input schema cannot be converted for function calling (a `$ref` that points
  nowhere): served with the plain schema `{"type": "object"}`, a warning naming the tool and the mark
  `_meta["rollout/degraded"]` (the run's summary and the tool report list it), so one odd tool neither stops
  the gateway nor every environment that lists it;
- the upstream dies later: its calls answer at once with an `is_error` result marked
  `_meta["rollout/outcome"] = "upstream_unavailable"` (the HTTP proxy answers 502), while the
  session (an `rollout.mcp_client.session.McpSession`) reopens itself in the background with backoff, at
  least every `retry_interval_s`, so a restarted upstream comes back by itself.

Built from the SDK's public seams: an `Extension` intercepts `tools/call` for upstream tool
names (below the runner's envelope pass, so results are serialized like local ones), and a
server middleware appends the upstream tools to `tools/list`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, CallToolRequestParams, CallToolResult, TextContent, Tool

from rollout.errors import ConfigError, GatewayError, SchemaError
from rollout.gateway.tool_params import check_pins, hide_pinned, schema_parameter_checks
from rollout.gateway.toolsets import ToolSet
from rollout.gateway_file import TOOLSET_RESOURCE_TYPE, GatewayFile, GatewayModule
from rollout.mcp_client.schema import FALLBACK_PARAMETERS, input_schema_to_parameters
from rollout.mcp_client.session import McpSession
from rollout.mcp_client.transport import describe, is_transport_failure, root_cause
from rollout.wire import (
    META_ATTEMPT,
    META_CALL_ID,
    META_DEGRADED,
    META_GROUP,
    META_OUTCOME,
    META_RESOURCE_TYPE,
    META_RUN_ID,
    META_SOURCE,
    META_TASK_ID,
    META_UPSTREAM,
    META_WORKER_ID,
)

logger = logging.getLogger(__name__)

SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
_FORWARDED_META = (META_CALL_ID, META_TASK_ID, META_WORKER_ID, META_ATTEMPT, META_RUN_ID)


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One `source: mcp` module of a gateway file."""

    name: str
    """Tool-set name: the tools' `rollout/group`."""
    url: str
    """The upstream's MCP URL (streamable HTTP, or SSE when it ends with /sse)."""
    resource_type: str
    """The module's resource type (`rag`, ...)."""
    tools: tuple[str, ...] | None
    """Tools to serve; None serves all the upstream lists."""
    fixed_params: Mapping[str, Any] = field(default_factory=dict)
    """Arguments pinned for every tool that takes them (checked against the schemas when the gateway starts)."""
    active: bool = True
    """Whether its tool set is active when a task starts (with `dynamic_toolsets`)."""
    description: str | None = None
    """What `list_toolsets` says about its tool set; None names the URL."""

    @classmethod
    def from_module(cls, module: GatewayModule) -> UpstreamSpec:
        assert module.name is not None and module.url is not None  # the gateway file's validation
        return cls(module.name, module.url, module.resource_type, None if module.tools is None else tuple(module.tools),
                   dict(module.fixed_params), module.active, module.description)


def upstream_specs(gateway: GatewayFile) -> list[UpstreamSpec]:
    """The upstream modules of a gateway file, in order."""
    return [UpstreamSpec.from_module(m) for m in gateway.modules if m.source == "mcp"]


class UpstreamToolSet:
    """One upstream server: its served tools and the session calls go through."""

    def __init__(self, spec: UpstreamSpec, *, connect_timeout_s: float = 10.0, read_timeout_s: float = 300.0,
                 retry_interval_s: float = 1.0):
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self.retry_interval_s = retry_interval_s
        self.tools: list[Tool] = []
        """The upstream's tools as this gateway lists them (schemas without the pinned parameters, `_meta` tagged)."""
        self.pins: dict[str, dict[str, Any]] = {}
        """Pinned arguments by tool name (`spec.fixed_params`, for the tools that take them), checked at start."""
        self._session = McpSession(
            spec.url, name=f"Upstream {spec.name}", peer=f"the upstream MCP server {spec.url}",
            label=f"upstream {spec.name!r}", read_timeout_s=read_timeout_s, open_timeout_s=connect_timeout_s,
            backoff_cap_s=retry_interval_s, log=logger,
        )

    async def start(self) -> None:
        """Open the session, list the tools and check the pins; a `GatewayError` names the URL when the upstream
        cannot be used, a `ConfigError` the parameter when a pin cannot be."""
        s = self.spec
        try:
            client = await self._session.open(self.connect_timeout_s)
            listed = (await client.list_tools()).tools
        except Exception as e:
            reason = "no answer" if isinstance(e, TimeoutError) else describe(self._session.error or e)
            await self._session.close()
            raise GatewayError(
                f"upstream MCP server {s.url} (tool set {s.name!r}) is unreachable: {reason} within "
                f"{self.connect_timeout_s:g} s. Start it first, or fix the module's \"url\" in the gateway file"
            ) from e
        by_name = {t.name: t for t in listed}
        wanted = list(by_name) if s.tools is None else list(s.tools)
        missing = [n for n in wanted if n not in by_name]
        if missing:
            await self._session.close()
            raise GatewayError(
                f"upstream MCP server {s.url} (tool set {s.name!r}) has no tool {', '.join(map(repr, missing))}. "
                f"It offers: {', '.join(by_name) or '(none)'}. Fix the module's \"tools\" list"
            )
        try:
            self.pins = check_pins(s.name, {n: schema_parameter_checks(by_name[n].input_schema) for n in wanted},
                                   s.fixed_params)
        except ConfigError as e:
            await self._session.close()
            raise ConfigError(f"upstream MCP server {s.url}: {e}") from None
        self.tools = [self._served(by_name[n]) for n in wanted]
        logger.info("Upstream %s at %s: %s", s.name, s.url, ", ".join(t.name for t in self.tools) or "(no tools)")

    def _served(self, tool: Tool) -> Tool:
        meta = {**(tool.meta or {}), META_GROUP: self.spec.name, META_RESOURCE_TYPE: self.spec.resource_type,
                META_SOURCE: "mcp", META_UPSTREAM: self.spec.url}
        schema = hide_pinned(tool.input_schema, self.pins.get(tool.name, {}))
        update: dict[str, Any] = {"meta": meta, "input_schema": schema}
        try:
            input_schema_to_parameters(schema)
        except SchemaError as e:
            logger.warning("tool %r of the upstream MCP server %s (tool set %r): its input schema cannot be "
                           "converted (%s); serving it with the plain schema %s. Fix the upstream tool's "
                           "inputSchema to offer its real parameters", tool.name, self.spec.url, self.spec.name, e,
                           FALLBACK_PARAMETERS)
            update["input_schema"] = dict(FALLBACK_PARAMETERS)
            meta[META_DEGRADED] = f'input schema cannot be converted ({e}); served as {{"type": "object"}}'
        return tool.model_copy(update=update)

    async def stop(self) -> None:
        await self._session.close()

    async def call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any]) -> CallToolResult:
        """Forward one call; a dead upstream gives an `upstream_unavailable` error result, never an exception."""
        client, generation = self._session.current()
        if client is None:
            # No waiting for the session to come back: the agent gets the error now and may try again.
            return self._unavailable(describe(self._session.error))
        # The pinned values win over whatever the client sent (it was never shown those parameters).
        arguments = {**arguments, **self.pins.get(name, {})}
        try:
            result = await client.call_tool(name, arguments, meta=meta or None)
        except Exception as e:  # transport failures surface as httpx2/anyio/OS errors, often grouped
            if isinstance(e, MCPError) and e.code == REQUEST_TIMEOUT:
                return error_result(f"upstream MCP server {self.spec.url} did not answer {name} in time: {e}")
            if not is_transport_failure(e):
                raise
            self._session.report_broken(generation, e)  # the session reopens itself
            return self._unavailable(describe(root_cause(e)))
        return _without_server_info(result)

    def _unavailable(self, reason: str) -> CallToolResult:
        s = self.spec
        return error_result(
            f"upstream MCP server {s.url} (tool set {s.name!r}) is unavailable: {reason}. "
            "Its tools answer again once it is back",
            outcome="upstream_unavailable",
        )


class UpstreamTools(Extension):
    """Every upstream tool set of a gateway: routes their calls and appends them to tools/list."""

    identifier = "dev.rollout/upstream-tools"

    def __init__(self, specs: Iterable[UpstreamSpec] = (), *, local_tools: Iterable[str] = (),
                 local_groups: Iterable[str] = (), catalog: Any = None, **set_options: Any):
        self.sets = [UpstreamToolSet(spec, **set_options) for spec in specs]
        self.local_tools = frozenset(local_tools)
        self.local_groups = frozenset(local_groups)
        self.catalog = catalog
        """A `ToolsetCatalog` to add each upstream as a `source="mcp"` tool set, when tool sets are dynamic."""
        self._owner: dict[str, UpstreamToolSet] = {}
        self._listed: list[dict[str, Any]] = []
        self._check_names()

    def _check_names(self) -> None:
        seen: set[str] = set()
        for s in self.sets:
            name = s.spec.name
            if name in seen or name in self.local_groups:
                raise ConfigError(
                    f"tool set name {name!r} of the upstream module {s.spec.url} is already a tool group of this "
                    "gateway. Give the module another \"name\""
                )
            seen.add(name)

    def settings(self) -> dict[str, Any]:
        return {"toolsets": [s.spec.name for s in self.sets]}

    @property
    def tool_names(self) -> list[str]:
        return list(self._owner)

    @property
    def fixed_params(self) -> dict[str, dict[str, Any]]:
        """Pinned arguments by upstream tool name, once started (for /healthz and the proxy's catalog)."""
        return {tool: dict(pins) for s in self.sets for tool, pins in s.pins.items() if tool in self._owner}

    async def start(self) -> None:
        """Connect every upstream in order; the first failure stops those already open and raises."""
        try:
            for s in self.sets:
                await s.start()
                self._register(s)
        except BaseException:
            await self.stop()
            raise

    def _register(self, s: UpstreamToolSet) -> None:
        for tool in s.tools:
            other = self._owner.get(tool.name)
            if tool.name in self.local_tools or other is not None:
                where = f"the upstream {other.spec.url}" if other is not None else "a local tool group"
                raise GatewayError(
                    f"tool {tool.name!r} of the upstream {s.spec.url} is also served by {where}. Leave it out "
                    f"with the module's \"tools\" list"
                )
            self._owner[tool.name] = s
        self._listed.extend(t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in s.tools)
        if self.catalog is not None and s.spec.resource_type == TOOLSET_RESOURCE_TYPE:
            self.catalog.add(ToolSet(
                name=s.spec.name, description=s.spec.description or f"Tools of the MCP server at {s.spec.url}",
                tools=tuple(t.name for t in s.tools), active=s.spec.active, source="mcp",
                resource_type=s.spec.resource_type,
            ))

    async def stop(self) -> None:
        for s in self.sets:
            await s.stop()
        self._owner.clear()
        self._listed.clear()

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        owner = self._owner.get(params.name)
        if owner is None:
            return await call_next(ctx)
        return await owner.call(params.name, params.arguments or {}, _forwarded_meta(params.meta))

    async def list_tools_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware: the upstream tools follow the local ones in every tools/list."""
        result = await call_next(ctx)
        if ctx.method == "tools/list" and self._listed and isinstance(result, dict):
            result = {**result, "tools": [*result.get("tools", []), *self._listed]}
        return result


def _forwarded_meta(meta: Any) -> dict[str, Any]:
    # The rollout ids travel on, so an upstream that keeps its own statistics can join them to ours.
    if not isinstance(meta, Mapping):
        return {}
    return {k: meta[k] for k in _FORWARDED_META if k in meta}


def _without_server_info(result: CallToolResult) -> CallToolResult:
    # The upstream's serverInfo stamp would otherwise win over this gateway's own.
    meta = {k: v for k, v in (result.meta or {}).items() if k != SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": meta or None})


def error_result(text: str, *, outcome: str | None = None) -> CallToolResult:
    """A tool error result the gateway makes itself, marked with its `outcome` (`rollout.wire.GATEWAY_MARKED`)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=True,
        _meta={META_OUTCOME: outcome} if outcome else None,
    )
