"""The OpenEnv HTTP and WebSocket routes of `rollout env`, as a Starlette app.

| route | answers |
|---|---|
| `WS /ws` | one client's episodes: messages `reset`, `step`, `state`, `close` (what `EnvClient` sends) |
| `POST /reset` | a new episode's first observation; the episode ends with the request (OpenEnv's HTTP routes keep none) |
| `POST /step` | `list_tools` (other actions need an episode: run episodes over `/ws`) |
| `GET /state` | the state of no episode yet |
| `GET /schema` | JSON schemas of the actions, observations and state |
| `GET /metadata`, `GET /health` | what is served; `{"status": "healthy"}` |

Each WebSocket is one episode at a time with its own MCP session on the gateway; connections run concurrently.
An HTTP error is `{"error": message}`; a WebSocket error is OpenEnv's `{"type": "error", "data": {"message",
"code"}}`, and the connection and its episode go on. Like the gateway's HTTP routes, every route wants the bearer
token when one is set (`ROLLOUT_GATEWAY_TOKEN`), and on a loopback address only requests addressed to it by its
loopback name, from no other web origin (the `mcp` SDK's DNS-rebinding checks, as `rollout.gateway.http_app`
sets them).
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from typing import Any

from mcp.server.transport_security import (
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from rollout.errors import EpisodeError
from rollout.gateway.auth import BearerTokenAuth
from rollout.gateway.http_app import loopback_security
from rollout.trainers.openenv.episode import Episode, ServedExperiment
from rollout.trainers.openenv.messages import (
    EnvironmentMetadata,
    ListToolsAction,
    parse_action,
    parse_reset,
    schemas,
    ws_error,
)

logger = logging.getLogger(__name__)

MESSAGES = '{"type": "reset" | "step" | "state" | "close", "data": {...}}'


class LoopbackOnly:
    """ASGI middleware: HTTP and WebSocket requests whose Host or Origin is not this server's loopback name get
    421 / 403 (the checks the `mcp` SDK makes on the gateway's MCP routes)."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings):
        self.app = app
        self.checks = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            connection = HTTPConnection(scope)
            refused = await self.checks.validate_request(connection, is_post=False)  # type: ignore[arg-type]
            if refused is not None:
                seen = connection.headers.get("host" if refused.status_code == 421 else "origin")
                reason = (f"{bytes(refused.body).decode()} {seen!r}: this environment answers only requests addressed "
                          "to it by its loopback name (127.0.0.1 or localhost), from no other web origin")
                await JSONResponse({"error": reason}, status_code=refused.status_code)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def answer(episode: Episode, raw: str) -> dict[str, Any] | None:
    """The reply to one WebSocket message; None for `close`."""
    try:
        message = json.loads(raw)
    except json.JSONDecodeError as e:
        return ws_error(f"invalid JSON ({e}): send {MESSAGES}", "INVALID_JSON")
    kind = message.get("type") if isinstance(message, dict) else None
    try:
        match kind:
            case "reset":
                return {"type": "observation", "data": await episode.reset(parse_reset(message.get("data")))}
            case "step":
                return {"type": "observation", "data": await episode.step(parse_action(message.get("data")))}
            case "state":
                return {"type": "state", "data": episode.state.model_dump(mode="json")}
            case "close":
                return None
            case _:
                return ws_error(f"unknown message type {kind!r}: send {MESSAGES}", "UNKNOWN_TYPE")
    except ValueError as e:
        return ws_error(str(e), "VALIDATION_ERROR")
    except EpisodeError as e:
        return ws_error(str(e), "EXECUTION_ERROR")
    except Exception as e:  # answered, as OpenEnv's server answers it, and logged whole: the connection goes on
        logger.exception("the %s message failed", kind)
        return ws_error(f"the environment failed on this {kind} ({type(e).__name__}: {e})", "EXECUTION_ERROR")


def create_app(served: ServedExperiment, *, host: str = "127.0.0.1", token: str | None = None) -> Starlette:
    """The environment's app; `host` is the address it binds (loopback: Host/Origin checked), `token` the bearer
    token every request must carry (None: none)."""

    async def episodes(websocket: WebSocket) -> None:
        await websocket.accept()
        episode = Episode(served)
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                # OpenEnv's clients send text frames; a binary frame is read as the same JSON
                raw = message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace")
                reply = await answer(episode, raw)
                if reply is None:
                    break
                await websocket.send_text(json.dumps(reply))
        except WebSocketDisconnect:  # gone while a reply was sent
            pass
        finally:
            await episode.close()
            with suppress(RuntimeError):  # the client may have closed it already
                await websocket.close()

    async def reset(request: Request) -> JSONResponse:
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        episode = Episode(served)
        try:
            return JSONResponse(await episode.reset(parse_reset(body)))
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=422)
        except EpisodeError as e:
            return JSONResponse({"error": str(e)}, status_code=409)
        finally:
            await episode.close()

    async def step(request: Request) -> JSONResponse:
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        if not isinstance(body, dict) or "action" not in body:
            return JSONResponse({"error": 'send {"action": {...}}'}, status_code=422)
        try:
            action = parse_action(body["action"])
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=422)
        if not isinstance(action, ListToolsAction):
            return JSONResponse({"error": "HTTP /step keeps no episode (OpenEnv's HTTP routes are stateless): run "
                                          "episodes over the WebSocket /ws, as openenv's EnvClient does"},
                                status_code=409)
        return JSONResponse(await Episode(served).step(action))

    async def state(_: Request) -> JSONResponse:
        return JSONResponse(Episode(served).state.model_dump(mode="json"))

    async def schema(_: Request) -> JSONResponse:
        return JSONResponse(schemas())

    async def metadata(_: Request) -> JSONResponse:
        exp = served.experiment
        about = EnvironmentMetadata(
            name=f"rollout {exp.mode}",
            description=(f"{len(served.questions)} questions of dataset {exp.config.dataset.name} with the tools of "
                         f"{exp.gateway_file.name}; reward: {served.metric} of the answer, at most {exp.max_turns} "
                         "turns"),
        )
        return JSONResponse(about.model_dump())

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    app = Starlette(routes=[
        WebSocketRoute("/ws", episodes),
        Route("/reset", reset, methods=["POST"]),
        Route("/step", step, methods=["POST"]),
        Route("/state", state, methods=["GET"]),
        Route("/schema", schema, methods=["GET"]),
        Route("/metadata", metadata, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ])
    if (security := loopback_security(host)) is not None:
        app.add_middleware(LoopbackOnly, security=security)
    if token:
        app.add_middleware(BearerTokenAuth, token=token)  # outermost: a request without the token learns nothing
    return app


async def _json_body(request: Request) -> Any:
    """The request's JSON body ({} when empty), or the 400 answer to a body that is not JSON."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        return JSONResponse({"error": f"the body is not JSON ({e})"}, status_code=400)
