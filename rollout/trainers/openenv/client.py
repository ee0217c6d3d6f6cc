"""Sending rollout's bearer token from an openenv-core client.

openenv-core 0.3.0's `EnvClient` opens its WebSocket with no way to add a header, so a client of an environment
that requires `ROLLOUT_GATEWAY_TOKEN` mixes this in before the client class:

    from openenv.core import GenericEnvClient
    from rollout.trainers.openenv.client import BearerToken

    class RolloutEnv(BearerToken, GenericEnvClient): ...

It replaces `EnvClient.connect` with one that sends `Authorization: Bearer <token>` (the `token` argument, else
`$ROLLOUT_GATEWAY_TOKEN`; none when both are empty) and otherwise connects as openenv-core does. It reads the
attributes `EnvClient.__init__` sets in openenv-core 0.3.0 (`_ws`, `_ws_url`, `_connect_timeout`,
`_max_message_size`); the tests run it against that version.
"""

from __future__ import annotations

from typing import Any

from rollout.wire import auth_headers, resolve_token


class BearerToken:
    """Mixin for an openenv-core `EnvClient` subclass: its WebSocket carries the bearer token."""

    _ws: Any
    _ws_url: str
    _connect_timeout: float
    _max_message_size: int

    def __init__(self, *args: Any, token: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._rollout_headers = auth_headers(resolve_token(token))

    async def connect(self) -> Any:
        if self._ws is not None:
            return self
        # openenv-core's own WebSocket client library, imported where that package is installed
        from websockets.asyncio.client import connect

        try:
            self._ws = await connect(self._ws_url, open_timeout=self._connect_timeout, max_size=self._max_message_size,
                                     additional_headers=self._rollout_headers)
        except Exception as e:  # as EnvClient.connect reports it
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {e}") from e
        return self
