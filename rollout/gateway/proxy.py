"""Flat-parameter HTTP proxy: find and call a gateway tool without speaking MCP.

    GET /proxy/tools

lists every served tool: its `name`, the `server` serving it (its tool group, or the upstream
tool set's name), its function-call spec (`function`: the OpenAI-style spec converted from its
MCP input schema, as `envs` offers it to models), `call_url` to POST its arguments to, and the
`fixed_params` the gateway file pins (hidden from the schema, always applied).

    POST /proxy/tools/{tool_name}/call
    POST /proxy/{server}/tools/{tool_name}/call     (the same call, naming the server; a tool
                                                     the named server does not serve is a 404)
    Content-Type: application/json
    X-Task-Id: task-7        (optional; the stats record's task_id)
    X-Call-Id: c-123         (optional; the stats record's call_id, generated when absent)
    X-Worker-Id: client-a    (optional; the stats record's worker_id)
    X-Run-Id: run-1          (optional; with X-Task-Id and X-Attempt, whose tool sets the call uses)
    X-Attempt: 1             (optional; the task's attempt, 1 when absent)

    {"query": "Who founded Veltrix Holdings?", "top_k": 3}

The body is the tool's arguments as one flat JSON object (an empty body means `{}`), exactly
the object a function-calling model produces from the tool's input schema, sent with a JSON
content type. The route gets the same Host/Origin (DNS-rebinding) checks as MCP on a loopback
gateway, so a web page the user visits cannot call tools through the user's browser. The call goes
through an in-process MCP session to this same server, so it passes the same middleware as an
MCP client's call: it is recorded once in `tool_stats/realtime_calls.jsonl`, tool-set gates and
the gateway's `--tool-timeout-s` apply, and upstream tools are forwarded the same way.

Every answer is a JSON object with `tool`, `call_id` and `outcome` (the stats category).

| status | when | body adds |
|---|---|---|
| 200 | the tool answered, including a tool error result | `is_error`, `text`, `content`, `structured_content` |
| 400 | the body is not a JSON object, or the arguments fail the tool's schema | `error` (the reason) |
| 403 / 421 | the Origin / Host header is not one this gateway serves (DNS-rebinding protection) | `error` |
| 404 | no tool of that name is exposed by this gateway, or the path names a server that does not serve it | `error` listing the exposed tools, or naming the right path |
| 413 | the body is over `MAX_BODY_BYTES` | `error` |
| 415 | the Content-Type is not JSON | `error` |
| 502 | the tool's upstream MCP server is unavailable | `error` |
| 504 | the call ran over the gateway's `--tool-timeout-s` | `error` |
| 500 | the MCP layer failed (a protocol error, not a tool result) | `error` |

A tool error (the tool ran and reported a problem, e.g. `top_k` over the limit, or its tool set
is not active for the task) is 200 with `is_error: true`, as in MCP: it is an answer meant for
the model to read and react to, and the status codes stay for calls that did not happen as
asked. Only a request that cannot be a call at all (400, 403, 413, 415 or 421 before any tool
runs, or a 404 for a server that does not serve the tool) is not counted in the stats.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Tool
from starlette.requests import Request
from starlette.responses import JSONResponse

from rollout.mcp_client.schema import mcp_tool_to_function
from rollout.mcp_client.session import McpSession
from rollout.mcp_client.transport import describe
from rollout.wire import (
    META_ACCOUNTING,
    META_ATTEMPT,
    META_CALL_ID,
    META_GROUP,
    META_RUN_ID,
    META_TASK_ID,
    META_WORKER_ID,
    classify_result,
)

logger = logging.getLogger(__name__)

PROXY_ROUTE = "/proxy/tools/{tool_name}/call"
PROXY_SERVER_ROUTE = "/proxy/{server}/tools/{tool_name}/call"
CATALOG_ROUTE = "/proxy/tools"
HEADER_TASK_ID = "x-task-id"
HEADER_CALL_ID = "x-call-id"
HEADER_WORKER_ID = "x-worker-id"
HEADER_RUN_ID = "x-run-id"
HEADER_ATTEMPT = "x-attempt"

STATUS_BY_OUTCOME = {
    "ok": 200,
    "tool_error": 200,
    "invalid_arguments": 400,
    "unknown_tool": 404,
    "upstream_unavailable": 502,
    "timeout": 504,
}
MAX_BODY_BYTES = 1024 * 1024
"""Largest request body the proxy reads (1 MiB): tool arguments are a query and a few numbers."""
_PYDANTIC_LINK = re.compile(r"^\s*For further information visit \S+\s*$", re.MULTILINE)


class ToolProxy:
    """The proxy route's handler, over one in-process MCP session to `server` (opened by `start`)."""

    def __init__(self, server: MCPServer, security: TransportSecuritySettings | None = None, *,
                 fixed_params: Callable[[], Mapping[str, Mapping[str, Any]]] = dict):
        # In-process, so it does not break; were it to, reopening it would be harmless.
        self._session = McpSession(server, name="http-proxy", label="the tool proxy", log=logger)
        self._security = TransportSecurityMiddleware(security)
        self.fixed_params = fixed_params
        """The parameters the gateway file pins, by tool name, for the catalog: asked at each listing, as an
        upstream's pins are known once it has started."""
        self._servers: dict[str, str] = {}
        """Tool name → the server the proxy path names for it, as last listed."""

    def protect(self, security: TransportSecuritySettings | None) -> None:
        """Check Host/Origin as `security` says: the same settings the app's MCP transport uses."""
        self._security = TransportSecurityMiddleware(security)

    async def start(self) -> None:
        await self._session.open(30.0)

    async def stop(self) -> None:
        await self._session.close()

    async def catalog(self, request: Request) -> JSONResponse:
        """`GET /proxy/tools`: every served tool with its function-call spec, call URL and pinned parameters."""
        refused = await self.host_refusal(request)
        if refused is not None:
            return JSONResponse({"error": refused[2]}, status_code=refused[0])
        client = self._session.client
        if client is None:
            return JSONResponse({"error": _NOT_RUNNING}, status_code=503)
        root = str(request.base_url).rstrip("/")
        pinned = self.fixed_params()
        tools = []
        for tool in (await client.list_tools()).tools:
            server = _server_of(tool)
            tools.append({
                "name": tool.name,
                "server": server,
                "function": mcp_tool_to_function(tool),
                "call_url": f"{root}/proxy/{server}/tools/{tool.name}/call",
                "fixed_params": dict(pinned.get(tool.name, {})),
            })
        return JSONResponse({"tools": tools})

    async def handle(self, request: Request) -> JSONResponse:
        """`POST /proxy/[{server}/]tools/{tool_name}/call` with the tool's arguments as a flat JSON object."""
        name = request.path_params["tool_name"]
        call_id = request.headers.get(HEADER_CALL_ID) or uuid.uuid4().hex
        base = {"tool": name, "call_id": call_id}
        refusal = await self._refusal(request)
        if refusal is None and "server" in request.path_params:
            refusal = await self._server_refusal(request.path_params["server"], name)
        if refusal is not None:
            status, outcome, error = refusal
            return _answer(status, {**base, "outcome": outcome, "error": error})
        raw = await _body(request)
        if raw is None:
            return _answer(413, {**base, "outcome": "invalid_request", "error": _TOO_LARGE})
        arguments, problem = _arguments(raw)
        if problem is not None:
            return _answer(400, {**base, "outcome": "invalid_request", "error": problem})
        client = self._session.client
        if client is None:
            return _answer(503, {**base, "outcome": "unavailable", "error": _NOT_RUNNING})
        meta = {META_CALL_ID: call_id}
        for header, key in ((HEADER_TASK_ID, META_TASK_ID), (HEADER_WORKER_ID, META_WORKER_ID),
                            (HEADER_RUN_ID, META_RUN_ID), (HEADER_ATTEMPT, META_ATTEMPT)):
            if request.headers.get(header):
                meta[key] = request.headers[header]
        try:
            result = await client.call_tool(name, arguments, meta=meta)
        except MCPError as e:
            return _answer(500, {**base, "outcome": "protocol_error", "error": f"tool {name} failed in MCP: {e}"})
        except Exception as e:  # e.g. a result that breaks the tool's own output schema
            logger.warning("proxy call to %s failed: %s", name, describe(e))
            return _answer(500, {**base, "outcome": "protocol_error", "error": f"tool {name} failed: {describe(e)}"})
        _, outcome, error, _ = classify_result(result)
        status = STATUS_BY_OUTCOME.get(outcome, 500)
        body: dict[str, Any] = {**base, "outcome": outcome}
        if status == 200:
            return _answer(200, {**body, **_result_fields(result)})
        if outcome == "unknown_tool":
            exposed = [t.name for t in (await client.list_tools()).tools]
            error = f"unknown tool {name!r}: this gateway exposes {', '.join(exposed) or 'no tools'}"
        elif outcome == "invalid_arguments":
            error = f"invalid arguments for {name}: {_PYDANTIC_LINK.sub('', error or '').strip()}"
        return _answer(status, {**body, "error": error})

    async def _server_refusal(self, server: str, name: str) -> tuple[int, str, str] | None:
        """A 404 when `server` does not serve tool `name`, naming the path that does."""
        client = self._session.client
        if client is None:
            return None  # answered as not running below
        if name not in self._servers:  # a tool's server never changes: the list is asked again only for a new name
            self._servers = {t.name: _server_of(t) for t in (await client.list_tools()).tools}
        serving = self._servers.get(name, server)
        if serving == server:
            return None  # served there, or unknown everywhere (the call itself says which tools exist)
        return 404, "unknown_tool", (f"server {server!r} serves no tool {name!r}; it is served by "
                                     f"{serving!r}: POST /proxy/{serving}/tools/{name}/call")

    async def host_refusal(self, request: Request) -> tuple[int, str, str] | None:
        """(status, outcome, reason) when the Host or Origin header is not one this gateway serves, else None: the
        check of the proxy's routes and of the gateway's `/healthz`, as `/mcp` checks its requests."""
        refused = await self._security.validate_request(request, is_post=False)
        if refused is None:
            return None
        if refused.status_code == 421:
            fix = "this gateway answers only requests addressed to it by its loopback name (127.0.0.1 or localhost)"
            seen = request.headers.get("host")
        else:
            fix = "web pages from other origins may not read this gateway or call its tools"
            seen = request.headers.get("origin")
        return refused.status_code, "forbidden", f"{bytes(refused.body).decode()} {seen!r}: {fix}"

    async def _refusal(self, request: Request) -> tuple[int, str, str] | None:
        """(status, outcome, reason) for a request refused before its body is read, else None."""
        refused = await self.host_refusal(request)
        if refused is not None:
            return refused
        content_type = request.headers.get("content-type", "")
        media_type = content_type.partition(";")[0].strip().lower()
        if media_type != "application/json" and not media_type.endswith("+json"):
            return 415, "invalid_request", (f"unsupported Content-Type {content_type or '(none)'!r}: "
                                            "send the arguments with 'Content-Type: application/json'")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return 413, "invalid_request", _TOO_LARGE
        return None


_NOT_RUNNING = "the tool proxy is not running: serve the gateway with rollout.gateway.server.serve or make_uvicorn"


def _server_of(tool: Tool) -> str:
    """Who serves a listed tool, as the proxy path names it: its group (an upstream's tool set name)."""
    return str((tool.meta or {}).get(META_GROUP) or "local")


_TOO_LARGE = f"the body is over {MAX_BODY_BYTES} bytes: tool arguments are one small flat JSON object"


async def _body(request: Request) -> bytes | None:
    """The request body, or None once more than `MAX_BODY_BYTES` arrive (whatever Content-Length said)."""
    received = bytearray()
    async for chunk in request.stream():
        received.extend(chunk)
        if len(received) > MAX_BODY_BYTES:
            return None
    return bytes(received)


def _arguments(raw: bytes) -> tuple[dict[str, Any], str | None]:
    example = 'send the tool\'s arguments as one flat JSON object, e.g. {"query": "...", "top_k": 3}'
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return {}, f"the body is not JSON ({e}): {example}"
    if not isinstance(value, dict):
        kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")
        return {}, f"the body is a JSON {kind}, not an object: {example}"
    return value, None


def _result_fields(result: CallToolResult) -> dict[str, Any]:
    content = [c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in result.content]
    text = "\n".join(c.get("text", "") for c in content if c.get("type") == "text").strip()
    return {"is_error": bool(result.is_error), "text": text, "content": content,
            "structured_content": result.structured_content,
            # What the call cost (`rollout.accounting.CallAccounting`): stage, context tokens, the tool's LLM tokens.
            "accounting": (result.meta or {}).get(META_ACCOUNTING)}


def _answer(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={"X-Call-Id": str(body["call_id"])})
