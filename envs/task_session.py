"""TaskSession: one task's view of an environment, recording (and emitting) its tool calls."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from rollout.events import EventLog, ToolCallEvent, ToolResultEvent
from rollout.records import ToolCallRecord, ToolResult
from rollout.wire import TOOLSETS_GROUP

if TYPE_CHECKING:
    from rollout.gateway_file import GatewayFile


class ToolSurface(Protocol):
    """What a task session needs of its environment (`HttpMCPEnv` is one); a protocol, so this module
    does not import the environment that creates its sessions."""

    gateway_config: GatewayFile
    system_prompt: str
    tool_specs: list[dict[str, Any]]

    def tool_specs_for(self, active_groups: Iterable[str]) -> list[dict[str, Any]]: ...

    def group_of(self, tool_name: str) -> str | None: ...

    async def call(
        self, name: str, arguments: dict[str, Any], task_id: str, call_id: str | None = None, attempt: int = 1
    ) -> tuple[ToolResult, ToolCallRecord]: ...


class TaskSession:
    """One task's view of an environment (implements `rollout.agents.base.TaskTools`)."""

    def __init__(self, env: ToolSurface, task_id: str, events: EventLog | None = None, attempt: int = 1):
        self.env = env
        self.task_id = task_id
        self.attempt = attempt
        """Which start of the task this is; the gateway's ledger records it with every call."""
        self.calls: list[ToolCallRecord] = []
        self.events = events
        config = env.gateway_config
        self.active_toolsets: list[str] | None = config.active_groups() if config.dynamic_toolsets else None
        """Tool sets active for this task (dynamic gateway files); None when every tool is offered.
        Starts from the file's defaults and follows the results of the tool-set tools."""

    @property
    def system_prompt(self) -> str:
        return self.env.system_prompt

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        if self.active_toolsets is None:
            return self.env.tool_specs
        return self.env.tool_specs_for(self.active_toolsets)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        call_id = uuid.uuid4().hex
        if self.events is not None:
            self.events.emit(ToolCallEvent(call_id=call_id, name=name, arguments=dict(arguments)))
        result, record = await self.env.call(name, arguments, self.task_id, call_id, self.attempt)
        self.calls.append(record)
        if self.events is not None:
            self.events.emit(ToolResultEvent(
                call_id=call_id, name=name, ok=record.ok, outcome=record.outcome,
                text=result.text, latency_ms=record.latency_ms, result_ids=record.result_ids,
            ))
        if self.active_toolsets is not None and result.ok and self.env.group_of(name) == TOOLSETS_GROUP:
            active = (result.structured or {}).get("active_toolsets")
            if isinstance(active, list):
                known = set(self.env.gateway_config.tool_groups())
                self.active_toolsets = [str(a) for a in active if str(a) in known]
        return result
