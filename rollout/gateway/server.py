"""The MCP gateway: an `mcp` SDK server exposing only the tool groups a gateway file names."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse

from rollout.gateway.config import GatewayFile
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.registry import ToolFn, ToolRegistry
from rollout.gateway.stats import StatsCollector, ToolStatsMiddleware

logger = logging.getLogger(__name__)

META_GROUP = "rollout/group"
META_RESOURCE_TYPE = "rollout/resource_type"


@dataclass(frozen=True, slots=True)
class ServedTool:
    """A registered function the gateway will expose, with the group that brought it in."""

    fn: ToolFn
    group: str
    resource_type: str


@dataclass(frozen=True, slots=True)
class GatewayPlan:
    """What a gateway file resolves to against the registry."""

    tools: list[ServedTool]
    """Tools to register, in gateway-file order."""
    requires: list[str]
    """Indexes those tools need (`dense`, `sparse`)."""
    skipped_resource_types: list[str]
    """Module types this gateway has no tools for (served elsewhere)."""


def plan_gateway(gateway: GatewayFile) -> GatewayPlan:
    """Resolve a gateway file's modules to tools; an unknown group in a served module raises."""
    ToolRegistry.autodiscover()
    served_types = {ToolRegistry.get_group(g).resource_type for g in ToolRegistry.group_names()}
    tools: dict[ToolFn, ServedTool] = {}
    requires: dict[str, None] = {}
    skipped: dict[str, None] = {}
    for module in gateway.modules:
        if module.resource_type not in served_types:
            skipped[module.resource_type] = None
            continue
        for name in module.tool_groups:
            group = ToolRegistry.get_group(name)
            requires.update(dict.fromkeys(group.requires))
            for fn in group.tools:
                tools.setdefault(fn, ServedTool(fn, name, group.resource_type))
    return GatewayPlan(list(tools.values()), list(requires), list(skipped))


@dataclass(slots=True)
class GatewayState:
    """Lifespan context every tool call can read."""

    kb: KnowledgeBase


def build_gateway(gateway: GatewayFile, kb: KnowledgeBase, collector: StatsCollector | None = None) -> MCPServer:
    """An MCPServer with only the configured tools, stats middleware and a /healthz route."""
    plan = plan_gateway(gateway)
    if plan.skipped_resource_types:
        logger.warning(
            "Skipping modules this gateway does not serve: %s", ", ".join(plan.skipped_resource_types)
        )

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[GatewayState]:
        yield GatewayState(kb=kb)

    server = MCPServer(
        name=gateway.server_name,
        lifespan=lifespan,
        middleware=[ToolStatsMiddleware(collector)] if collector is not None else None,
        log_level="WARNING",
    )
    for tool in plan.tools:
        server.add_tool(
            tool.fn,
            meta={META_GROUP: tool.group, META_RESOURCE_TYPE: tool.resource_type},
            structured_output=True,
        )
        logger.info("Registered tool: %s", tool.fn.__name__)

    tool_names = [t.fn.__name__ for t in plan.tools]

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "server_name": gateway.server_name, "tools": tool_names})

    return server


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving so port 0 gets a free port we can report before uvicorn starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def make_uvicorn(server: MCPServer) -> uvicorn.Server:
    """A uvicorn server for the gateway's streamable-HTTP app (MCP at `/mcp`)."""
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


async def serve(server: MCPServer, sock: socket.socket, *, ready_file: Path | None = None) -> None:
    """Serve on an already bound socket until signalled; write the URL to `ready_file` first."""
    if ready_file is not None:
        host, port = sock.getsockname()[:2]
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(f"http://{host}:{port}/mcp\n", encoding="utf-8")
        tmp.replace(ready_file)
    await make_uvicorn(server).serve(sockets=[sock])
