"""A loopback proxy in front of an OpenAI-compatible server that keeps every exchange, for tests to read the wire.

Runs put the proxy's URL in `llm.base_url`; each request goes on to the server unchanged and its answer comes back
unchanged, while the proxy keeps both (the path, the JSON request body, the status and the JSON response body).
The run's workers are other processes, so what they sent can only be seen here.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.gateway.loopback import serving


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and the server's answer."""

    path: str
    """Under the API root, e.g. `/chat/completions`."""
    request: Any
    status: int
    response: Any
    """The JSON body, or the text when it is not JSON."""


class WireLog:
    """The exchanges so far (thread-safe: the proxy runs on its own thread)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []

    def exchanges(self, path: str | None = None) -> list[Exchange]:
        """Those to `path` (all when None), in the order they were answered."""
        with self._lock:
            return [e for e in self._exchanges if path is None or e.path == path]

    def clear(self) -> None:
        with self._lock:
            self._exchanges.clear()

    async def forward(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        raw = await request.body()
        async with httpx.AsyncClient(timeout=300) as client:
            answer = await client.request(request.method, f"{self.upstream}{path}", content=raw,
                                          headers={"content-type": request.headers.get("content-type", "application/json")})
        with self._lock:
            self._exchanges.append(Exchange(path, _json(raw), answer.status_code, _json(answer.content)))
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/{path:path}", self.forward, methods=["GET", "POST"])])


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


@contextlib.contextmanager
def wire_log(upstream: str) -> Iterator[tuple[str, WireLog]]:
    """Serve a proxy to `upstream` (an API root ending in /v1); yield its own API root and its log."""
    log = WireLog(upstream.rstrip("/"))
    uv = uvicorn.Server(uvicorn.Config(log.app(), log_level="warning", timeout_graceful_shutdown=1))
    with serving(uv) as base:
        yield f"{base}/v1", log
