"""The seam between a policy (agent) and a tool surface (environment)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from envs.records import ToolResult


class TaskTools(Protocol):
    """The tool surface one task sees: what an agent may read and call."""

    @property
    def system_prompt(self) -> str:
        """Instructions for the mode (which tools exist and how to use them)."""
        ...

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas: [{"type": "function", "function": {name, description, parameters}}]."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call one tool; errors come back as `ToolResult(ok=False)`, never raise for tool failures."""
        ...


@dataclass(slots=True)
class AgentResult:
    """What a policy returns for one task."""

    prediction: str
    """The final short answer ("" when the agent gave up)."""
    turns: int
    """Policy steps taken (one per tool-call round plus the answering step)."""
    messages: list[dict[str, Any]]
    """The conversation in chat-completions form, tool results included."""


class Agent(Protocol):
    """A policy that answers one question with the tools it is given."""

    async def run(self, question: str, tools: TaskTools) -> AgentResult: ...
