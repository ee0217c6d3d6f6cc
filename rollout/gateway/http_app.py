"""The gateway as an HTTP app: an MCP transport, the tool proxy, the bearer token, and what runs beside them.

`GatewayServer` is the `MCPServer` that `build_gateway` returns; besides the tools it holds the
sessions that must live as long as the app, in the serving event loop: one to each upstream MCP
server and the proxy's in-process one. `gateway_app` wraps the SDK's streamable-HTTP or SSE app
so that those open at startup (an unreachable upstream fails the startup) and close at shutdown.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult
from starlette.applications import Starlette

from rollout.errors import ConfigError
from rollout.gateway.auth import BearerTokenAuth
from rollout.gateway.encodable import TextCheck
from rollout.gateway.proxy import CATALOG_ROUTE, PROXY_ROUTE, PROXY_SERVER_ROUTE, ToolProxy
from rollout.gateway.retrieve_api import RETRIEVE_ROUTE, RETRIEVER_ROUTE, RetrieveApi
from rollout.gateway.runs_api import RUNS_ROUTE, RunsApi
from rollout.gateway.stats import RunLedgers
from rollout.gateway.structured import structured_only
from rollout.gateway.upstream import UpstreamTools

Transport = Literal["streamable-http", "sse"]
MCP_PATHS: dict[str, str] = {"streamable-http": "/mcp", "sse": "/sse"}
"""Where each transport serves MCP (SSE also posts messages to `/messages/`)."""


class GatewayServer(MCPServer):
    """An `MCPServer` with upstream tool sets and the flat-parameter HTTP proxy (`GET /proxy/tools` lists the
    tools, `POST /proxy/[{server}/]tools/{name}/call` calls one); every tool call's text is checked
    (`rollout.gateway.encodable.TextCheck`)."""

    def __init__(self, *args: Any, upstreams: UpstreamTools | None = None,
                 local_fixed_params: Mapping[str, Mapping[str, Any]] | None = None, ledgers: RunLedgers | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Innermost, so that the middleware `build_gateway` puts outside (the stats) records what it refuses.
        self.middleware.append(TextCheck())
        self.ledgers = ledgers if ledgers is not None else RunLedgers()
        """Where its stats middleware records calls (`rollout.gateway.stats.RunLedgers`); closed when serving ends."""
        self.upstreams = upstreams if upstreams is not None else UpstreamTools()
        self.local_fixed_params = {tool: dict(pins) for tool, pins in (local_fixed_params or {}).items()}
        """Pinned arguments of the registered tools, by tool name (the upstream tools' come from `upstreams`)."""
        self.proxy = ToolProxy(self, loopback_security("127.0.0.1"), fixed_params=self.fixed_params)
        self.custom_route(PROXY_ROUTE, methods=["POST"], name="tool_proxy")(self.proxy.handle)
        self.custom_route(PROXY_SERVER_ROUTE, methods=["POST"], name="tool_proxy_by_server")(self.proxy.handle)
        self.custom_route(CATALOG_ROUTE, methods=["GET"], name="tool_catalog")(self.proxy.catalog)
        self.retrieval: RetrieveApi | None = None
        """The trainers' `/retrieve` routes, once `serve_retrieval` gave them."""
        self.runs: RunsApi | None = None
        """The `/runs` route, once `serve_runs` gave it."""

    def serve_retrieval(self, api: RetrieveApi) -> None:
        """Answer `POST /retrieve` and `POST /retrieve/{retriever}` with `api` (see `rollout.gateway.retrieve_api`)."""
        self.retrieval = api
        self.custom_route(RETRIEVE_ROUTE, methods=["POST"], name="retrieve")(api.handle)
        self.custom_route(RETRIEVER_ROUTE, methods=["POST"], name="retrieve_by_retriever")(api.handle)

    def serve_runs(self, api: RunsApi) -> None:
        """Answer `POST /runs` with `api`: a run registers the folder its calls go to (`rollout.gateway.runs_api`)."""
        self.runs = api
        self.custom_route(RUNS_ROUTE, methods=["POST"], name="runs")(api.handle)

    def fixed_params(self) -> dict[str, dict[str, Any]]:
        """Every served tool's pinned arguments, by tool name: local ones, and the upstream ones once started."""
        return {**self.local_fixed_params, **self.upstreams.fixed_params}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """The SDK's call, except that a client which makes the text from the structured content itself
        (request `_meta` `rollout/text`) gets a typed result without it: see `rollout.gateway.structured`."""
        answered = await structured_only(self._tool_manager, name, arguments, context)
        return answered if answered is not None else await super().call_tool(name, arguments, context)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open the upstream sessions (a `GatewayError` names one that is unreachable), then the proxy's."""
        async with contextlib.AsyncExitStack() as stack:
            await self.upstreams.start()
            stack.push_async_callback(self.upstreams.stop)
            await self.proxy.start()
            stack.push_async_callback(self.proxy.stop)
            yield


def mcp_path(transport: str) -> str:
    """The MCP endpoint path of a transport; an unknown one is a `ConfigError` listing the choices."""
    try:
        return MCP_PATHS[transport]
    except KeyError:
        raise ConfigError(f"unknown transport {transport!r}: use one of {', '.join(MCP_PATHS)}") from None


def loopback_security(host: str) -> TransportSecuritySettings | None:
    """Host/Origin checks for a gateway bound to `host`: on for a loopback address, off otherwise.

    The same settings the SDK applies to MCP on its own (`streamable_http_app(host=...)`); they are
    made here once so that the proxy route gets exactly what `/mcp` gets.
    """
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def gateway_app(
    server: MCPServer,
    *,
    transport: str = "streamable-http",
    auth_token: str | None = None,
    host: str = "127.0.0.1",
    start_runtime: bool = True,
    stateless: bool = False,
) -> Starlette:
    """The ASGI app serving `server` over `transport`; `start_runtime=False` when the caller runs `server.running()`.

    `stateless` (streamable HTTP only) keeps no MCP session between requests, so any replica of a
    Ray Serve gateway can answer any request (`rollout.gateway.serve_replica`).
    """
    mcp_path(transport)
    if stateless and transport != "streamable-http":
        raise ConfigError(f"a stateless gateway serves streamable-http only, not {transport}")
    security = loopback_security(host)
    if transport == "sse":
        app = server.sse_app(host=host, transport_security=security)
    else:
        # JSON response mode: a call is answered with one JSON body, without the SSE mode's per-request task
        # group and stream (the gateway sends no notifications mid-call).
        app = server.streamable_http_app(host=host, transport_security=security, json_response=True,
                                         stateless_http=stateless)
    if isinstance(server, GatewayServer):
        server.proxy.protect(security)
        if server.retrieval is not None:
            server.retrieval.protect(security)
        if server.runs is not None:
            server.runs.protect(security)
    if start_runtime and isinstance(server, GatewayServer):
        inner = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(a: Starlette) -> AsyncIterator[Any]:
            async with server.running(), inner(a) as state:
                yield state

        app.router.lifespan_context = lifespan
    if auth_token:
        app.add_middleware(BearerTokenAuth, token=auth_token)
    return app
