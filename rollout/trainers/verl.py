"""A rollout gateway's tools as verl tools: `GatewayTool`, a `verl.tools.base_tool.BaseTool` for any tool a gateway
serves, named in verl's tool config (`rollout gateway --verl-tools FILE.yaml` writes it, see
`rollout.trainers.verl_config`).

verl 0.9.1's tool agent loop runs every tool call the policy makes as one tool instance: `create(create_kwargs=...)`,
`execute(instance_id, arguments, agent_data=...)`, `release(instance_id)`. Here an instance is one
`rollout.trainers.tool_session.ToolSession`: `create` opens it (a gateway that cannot be reached is an error naming
the fix), `execute` calls the tool over MCP and returns its text exactly as the evaluated agent reads it
(`ToolResult.text`; a tool's error is its error text, never an exception), `release` closes it. Each call's line in
the gateway's ledger is marked `traffic: train`, under the trajectory's id as its task id: verl's `request_id` of
the trajectory (`agent_data`, one per trajectory: all its calls share it) or, called without `agent_data`, the
instance id; with the training step whose weights wrote the call (`agent_data.extra_fields["max_global_steps"]`,
which verl's vLLM and SGLang servers report) when verl gives one.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any
from urllib.parse import urlsplit

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from verl.utils.rollout_trace import rollout_trace_op
except ModuleNotFoundError as e:
    if (e.name or "").partition(".")[0] != "verl":
        raise  # verl is there, and something it imports is not: its own message says what
    raise ImportError("rollout.trainers.verl is a verl tool and needs verl: pip install verl==0.9.1 "
                      "(the version it is tested with)") from e

from rollout.errors import ConfigError, GatewayError
from rollout.trainers.tool_session import GatewayTarget, ToolSession
from rollout.trainers.verl_config import GatewayToolConfig, verl_tool_schema

__all__ = ["GatewayTool", "policy_step"]

logger = logging.getLogger(__name__)

WORKER_ID = "verl"
"""The worker id of every call in the gateway's ledger."""


def policy_step(agent_data: Any) -> int | None:
    """The training step of the weights that wrote the trajectory's last turn, as verl's rollout servers report it
    (`max_global_steps` in the agent loop's `extra_fields`); None when verl reports none."""
    extra = getattr(agent_data, "extra_fields", None) or {}
    step = extra.get("max_global_steps", extra.get("global_steps"))
    return None if step is None else int(step)


class GatewayTool(BaseTool):
    """One tool of a running rollout gateway (`class_name: rollout.trainers.verl.GatewayTool`); its `config` is a
    `GatewayToolConfig`, its `tool_schema` the tool's function spec as the gateway offers it."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        if tool_schema is None:
            raise ConfigError("a GatewayTool needs its tool_schema, the gateway's spec of the tool: write the tool "
                              "config with rollout gateway --config GATEWAY_FILE --port N --verl-tools FILE.yaml")
        super().__init__(config, tool_schema)
        self.settings = GatewayToolConfig.from_config(config)
        self.gateway_file = self.settings.resolved_gateway_file()
        self._sessions: dict[str, ToolSession] = {}

    def target(self) -> GatewayTarget:
        """The gateway, with the token the config's variable holds now (none when it is unset or empty)."""
        s = self.settings
        return GatewayTarget(s.url, self.gateway_file, os.environ.get(s.token_env, ""), s.call_timeout_s,
                             s.reconnect_timeout_s)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Open the instance's MCP session; a `GatewayError` naming the fix when the gateway cannot be reached or
        does not offer this tool as the tool config shows it."""
        instance_id = instance_id or uuid.uuid4().hex
        session = ToolSession(self.target(), instance_id, worker_id=WORKER_ID)
        s = self.settings
        await session.open_or_refuse(
            f"verl tool {self.name}", f"Start the gateway the tool config names: rollout gateway --config "
            f"{self.gateway_file} --port {self._port()} --output-dir DIR", s.token_env, "verl")
        if (problem := self._offered_problem(session)) is not None:
            await session.close()
            raise GatewayError(
                f"verl tool {self.name}: {problem}. Write the tool config from the gateway file and options the "
                f"gateway serves with: rollout gateway --config GATEWAY_FILE --port {self._port()} ... "
                "--verl-tools FILE.yaml")
        self._sessions[instance_id] = session
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                      ) -> tuple[ToolResponse, float, dict]:
        """Call the tool; its text as the evaluated agent reads it, no step reward, and the call's outcome."""
        session = self._sessions.get(instance_id)
        if session is None:
            return ToolResponse(text=f"tool {self.name} has no open instance {instance_id!r}"), 0.0, {}
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            # verl's agent loop names the trajectory only here; the instance serves this one call of it.
            session.trajectory_id = str(agent_data.request_id)
            session.step = policy_step(agent_data)
        try:
            result = await session.call(self.name, dict(parameters))
        except Exception as e:  # noqa: BLE001 - a failure the session did not make a result: the policy reads it too
            logger.warning("verl tool %s: call failed: %s", self.name, e)
            return ToolResponse(text=f"tool {self.name} failed: {e}"), 0.0, {"ok": False}
        record = session.calls[-1]
        return ToolResponse(text=result.text), 0.0, {"ok": record.ok, "outcome": record.outcome,
                                                      "latency_ms": record.latency_ms}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        session = self._sessions.pop(instance_id, None)
        if session is not None:
            await session.close()

    def _offered_problem(self, session: ToolSession) -> str | None:
        """Why the gateway does not offer this tool as the policy is shown it (a gateway serving another gateway
        file, or other tools than when the tool config was written); None when it does."""
        offered = {spec["function"]["name"]: spec for spec in session.tool_specs}
        if self.name not in offered:
            return (f"the gateway at {self.settings.url} serves no tool {self.name} of {self.gateway_file} (of that "
                    f"file's tools it serves {', '.join(offered) or 'none'}): it serves another gateway file")
        if OpenAIFunctionToolSchema.model_validate(verl_tool_schema(offered[self.name])) != self.tool_schema:
            return f"the gateway at {self.settings.url} offers {self.name} with another schema than the tool config"
        return None

    def _port(self) -> str:
        return str(urlsplit(self.settings.url).port or "PORT")
