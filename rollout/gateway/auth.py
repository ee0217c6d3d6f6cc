"""Optional bearer token: when the gateway has one, every route requires it.

The token comes from the `ROLLOUT_GATEWAY_TOKEN` environment variable (the supported way: a
command line is visible to every user of the machine, and `python -m rollout` refuses a literal
`gateway.auth_token=` since Hydra would write it to disk), the standalone CLI's `--auth-token`,
or `GatewayConfig.auth_token` when a run is built in Python. With a token set, MCP (`/mcp` or `/sse` and
`/messages/`), `/healthz` and the HTTP proxy answer 401 with a one-line JSON reason unless the
request carries `Authorization: Bearer <token>`. Clients send it with `auth_headers(token)`.
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from rollout.wire import TOKEN_ENV

_HOW = f"start the client with the gateway's token (export {TOKEN_ENV}=<token>)"


class BearerTokenAuth:
    """ASGI middleware: HTTP requests without `Authorization: Bearer <token>` get 401."""

    def __init__(self, app: ASGIApp, token: str):
        if not token:
            raise ValueError("BearerTokenAuth needs a non-empty token")
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        reason = self._refusal(dict(scope.get("headers") or []).get(b"authorization"))
        if reason is None:
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {"error": reason}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="rollout-gateway"'}
        )
        await response(scope, receive, send)

    def _refusal(self, header: bytes | None) -> str | None:
        if header is None:
            return f"missing bearer token: this gateway requires 'Authorization: Bearer <token>'; {_HOW}"
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return f"the Authorization header is not 'Bearer <token>'; {_HOW}"
        if not hmac.compare_digest(token.strip(), self._expected):
            return f"wrong bearer token: it is not the one this gateway was started with; {_HOW}"
        return None
