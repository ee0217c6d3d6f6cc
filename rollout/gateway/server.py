"""The MCP gateway: an `mcp` SDK server exposing only the tool groups a gateway file names."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse

from rollout.errors import ConfigError
from rollout.gateway.http_app import GatewayServer, gateway_app, mcp_path
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.metering import CallAccountant
from rollout.gateway.plan import plan_gateway
from rollout.gateway.registry import ToolRegistry, tool_description
from rollout.gateway.retrieve_api import DEFAULT_MAX_PENDING, DEFAULT_MAX_WAIT_S, RetrieveApi
from rollout.gateway.runs_api import RunsApi
from rollout.gateway.stats import RunLedgers, StatsCollector, ToolStatsMiddleware
from rollout.gateway.timeout import CallTimeout
from rollout.gateway.tool_params import bind_tool
from rollout.gateway.toolsets import ToolsetCatalog, ToolsetGate
from rollout.gateway.upstream import UpstreamTools, upstream_specs
from rollout.gateway_file import GatewayFile
from rollout.wire import META_GROUP, META_RESOURCE_TYPE

logger = logging.getLogger(__name__)

DEFAULT_THREADS_PER_GROUP = 32
"""Worker threads each tool group's calls may use at once (a batch of dense queries needs up to
`retriever.dense.max_query_batch` of them waiting together)."""


@dataclass(slots=True)
class GatewayState:
    """Lifespan context every tool call can read."""

    kb: KnowledgeBase
    toolsets: ToolsetCatalog | None = None
    """Per-task tool-set state when the gateway file is dynamic."""


def build_gateway(
    gateway: GatewayFile, kb: KnowledgeBase, stats: StatsCollector | RunLedgers | None = None, *,
    tool_timeout_s: float | None = None, registry: ToolRegistry | None = None,
    threads_per_group: int = DEFAULT_THREADS_PER_GROUP, retrieve_max_pending: int = DEFAULT_MAX_PENDING,
    retrieve_max_wait_s: float = DEFAULT_MAX_WAIT_S, serve_runs: bool = True,
) -> GatewayServer:
    """An MCPServer with only the configured tools (local and upstream), stats middleware, /healthz and the proxy.

    `stats` is where calls are recorded: one collector (None: nowhere), or `RunLedgers` holding it, whose
    registered runs' calls go to their own folders (`serve_runs` adds `POST /runs`, for them to register;
    `rollout.gateway.runs_api`). `server.ledgers` is the `RunLedgers` used, to close when serving ends.

    Each tool group's sync tools run on worker threads of their own, at most `threads_per_group` at once:
    a group whose calls hang fills its own slots only, and with `tool_timeout_s` a call waiting for a slot
    (or holding one) answers `timeout` and gives it back. Upstream sessions open when the server runs
    (`serve`, `make_uvicorn`, or `server.running()`). Trainers' `POST /retrieve` requests run on pools of the
    same size of their own, at most `retrieve_max_pending` queries at once; a request past that waits its turn up
    to `retrieve_max_wait_s` seconds (`rollout.gateway.retrieve_api`).
    """
    if threads_per_group < 1:
        raise ConfigError(f"threads per tool group must be at least 1, got {threads_per_group}")
    plan = plan_gateway(gateway, registry)
    if plan.skipped_resource_types:
        logger.warning(
            "Skipping modules this gateway does not serve: %s", ", ".join(plan.skipped_resource_types)
        )

    # Sets of tools proxied from other MCP servers join with `catalog.add(ToolSet(..., source="mcp"))` when they start.
    catalog = ToolsetCatalog(plan.toolsets) if plan.dynamic else None

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[GatewayState]:
        yield GatewayState(kb=kb, toolsets=catalog)

    upstreams = UpstreamTools(
        upstream_specs(gateway), local_tools=[t.fn.__name__ for t in plan.tools],
        local_groups=[t.group for t in plan.tools], catalog=catalog,
    )
    ledgers = stats if isinstance(stats, RunLedgers) else RunLedgers(stats)
    # Outermost first: the stats middleware also records the calls the tool-set gate refuses.
    middleware: list[Any] = [ToolStatsMiddleware(ledgers)]
    if catalog is not None:
        middleware.append(ToolsetGate(catalog))
    # Outermost first: every answer (a timeout's too) leaves with its accounting.
    stages = {t.fn.__name__: t.stage for t in plan.tools}
    extensions: list[Any] = [CallAccountant(kb.token_counter(), stages)]
    if tool_timeout_s:
        extensions.append(CallTimeout(tool_timeout_s))
    if upstreams.sets:
        middleware.append(upstreams.list_tools_middleware)
        extensions.append(upstreams)
    server = GatewayServer(
        name=gateway.server_name,
        lifespan=lifespan,
        middleware=middleware,
        extensions=extensions,
        upstreams=upstreams,
        ledgers=ledgers,
        local_fixed_params={t.fn.__name__: t.fixed_params for t in plan.tools if t.fixed_params},
        log_level="WARNING",
    )
    limiters = {group: anyio.CapacityLimiter(threads_per_group) for group in dict.fromkeys(t.group for t in plan.tools)}
    for tool in plan.tools:
        server.add_tool(
            bind_tool(tool.fn, tool.fixed_params, kb, limiters[tool.group]),
            description=tool_description(tool.fn),
            meta={META_GROUP: tool.group, META_RESOURCE_TYPE: tool.resource_type},
            structured_output=True,
        )
        logger.info("Registered tool: %s", tool.fn.__name__)

    tool_names = [t.fn.__name__ for t in plan.tools]
    server.serve_retrieval(RetrieveApi.for_tools(kb, [(t.fn.__name__, t.fixed_params) for t in plan.tools],
                                                 threads_per_group, ledgers.default, retrieve_max_pending,
                                                 retrieve_max_wait_s))
    if serve_runs:
        server.serve_runs(RunsApi(ledgers))

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        # Checked as every route is: a DNS-rebinding page must not read the tools and their pins.
        if (refused := await server.proxy.host_refusal(request)) is not None:
            return JSONResponse({"error": refused[2]}, status_code=refused[0])
        tools = tool_names + server.upstreams.tool_names
        return JSONResponse({"status": "ok", "server_name": gateway.server_name, "tools": tools,
                             "fixed_params": server.fixed_params()})

    return server


STOP_GRACE_S = 2.0
"""How long a stopping gateway lets the calls in flight finish (and reach the ledger) before it cancels them.
Idle sessions do not hold a stop; a cancelled call's tool thread is a daemon (`tool_params`) and holds nothing."""


def make_uvicorn(
    server: MCPServer, *, transport: str = "streamable-http", auth_token: str | None = None,
    host: str = "127.0.0.1", start_runtime: bool = True, stop_grace_s: float = 5.0,
) -> uvicorn.Server:
    """A uvicorn server for the gateway's app: MCP at `/mcp` (streamable HTTP) or `/sse` (SSE), see `gateway_app`."""
    app = gateway_app(server, transport=transport, auth_token=auth_token, host=host, start_runtime=start_runtime)
    # No WebSocket route: ws="none" spares the start the websockets library's import (a tenth of a second).
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=stop_grace_s, ws="none")
    return uvicorn.Server(config)


async def serve(
    server: MCPServer, sock: socket.socket, *, ready_file: Path | None = None, transport: str = "streamable-http",
    auth_token: str | None = None,
) -> None:
    """Serve on an already bound socket until signalled; write the MCP URL to `ready_file` first.

    Upstream sessions open before the URL is announced: an unreachable upstream raises `GatewayError` here.
    Signalled, it stops within about `STOP_GRACE_S`, whatever sessions are open and calls are in flight.
    """
    host, port = sock.getsockname()[:2]
    runtime = server.running() if isinstance(server, GatewayServer) else contextlib.nullcontext()
    async with runtime:
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(f"http://{host}:{port}{mcp_path(transport)}\n", encoding="utf-8")
            tmp.replace(ready_file)
        uv = make_uvicorn(server, transport=transport, auth_token=auth_token, host=host, start_runtime=False,
                          stop_grace_s=STOP_GRACE_S)
        await uv.serve(sockets=[sock])
