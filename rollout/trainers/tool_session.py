"""One trajectory's tools on a running gateway, over its own MCP session, marked as training traffic.

A trainer runs many trajectories at once; each opens a `ToolSession` (one MCP session, ~40 ms) when it starts and
closes it when it ends, so per-task state on the gateway (dynamic tool sets, the step tools' working set) stays
apart between trajectories, as it does between tasks of an evaluation run. Calls go through `HttpMCPRagEnv`, the
environment the evaluation's workers use: the same tools of the same gateway file, the same token, timeouts,
reconnects and outcomes. Each call's ledger line carries `traffic: "train"` and the trainer's step when given.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from envs.http_mcp_rag_env import HttpMCPRagEnv
from rollout.errors import GatewayError
from rollout.records import ToolCallRecord, ToolResult
from rollout.wire import TRAFFIC_TRAIN


@dataclass(frozen=True, slots=True)
class GatewayTarget:
    """Where a trainer's tools are: a running `rollout gateway` and the gateway file it serves."""

    url: str
    """The gateway's MCP URL (`http://HOST:PORT/mcp`, or `/sse`)."""
    gateway_file: Path
    """The experiment's gateway file: the tool groups offered, as the evaluation offered them."""
    token: str | None = None
    """Bearer token; None reads `$ROLLOUT_GATEWAY_TOKEN` (see `rollout.wire.resolve_token`)."""
    call_timeout_s: float = 60.0
    reconnect_timeout_s: float = 120.0


class ToolSession:
    """The tools one trajectory calls (`async with ToolSession(target, "traj-1") as tools: await tools.call(...)`)."""

    def __init__(self, target: GatewayTarget, trajectory_id: str | None = None, *, step: int | None = None,
                 worker_id: str = "trainer"):
        self.trajectory_id = trajectory_id or uuid.uuid4().hex
        """The ledger's task id of every call of this session."""
        self.step = step
        """The trainer's step, kept in the ledger with each call (None: not sent)."""
        self.env = HttpMCPRagEnv(
            target.url, target.gateway_file, worker_id=worker_id, auth_token=target.token,
            call_timeout_s=target.call_timeout_s, reconnect_timeout_s=target.reconnect_timeout_s,
            traffic=TRAFFIC_TRAIN)
        self.calls: list[ToolCallRecord] = []

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the MCP session and list the tools (a `GatewayError` naming the fix when the gateway is not there)."""
        await self.env.start()

    async def open_or_refuse(self, who: str, start: str, token_env: str, where: str) -> None:
        """`open`, or a `GatewayError` saying who asked, what failed, how to start the gateway (`start`) and where to
        set its token (`$token_env` where `where` runs)."""
        try:
            await self.open()
        except GatewayError as e:
            await self.close()
            cause = e.__cause__ or e
            raise GatewayError(f"{who}: no MCP session at {self.env.url} ({type(cause).__name__}: {cause}). {start}; "
                               f"if it requires a token, set ${token_env} where {where} runs") from e

    async def close(self) -> None:
        await self.env.close()

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The OpenAI-style function specs of the offered tools, exactly as an evaluation's agent is shown them."""
        return self.env.tool_specs

    @property
    def system_prompt(self) -> str:
        return self.env.system_prompt

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool; a failure is an error result (its text says what went wrong), never an exception."""
        result, record = await self.env.call(name, arguments, self.trajectory_id, step=self.step)
        self.calls.append(record)
        return result
