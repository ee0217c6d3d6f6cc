"""The seam between a policy (agent) and a tool surface (environment)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollout.events import EventLog
from rollout.records import ToolResult

logger = logging.getLogger(__name__)


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
    usage: dict[str, float] = field(default_factory=dict)
    """Token usage summed over the task (prompt_tokens, completion_tokens, total_tokens; cost_usd when
    prices are configured); empty for policies without a language model."""
    out_of_turns: bool = False
    """The policy used all its turns without giving an answer (`prediction` is then "")."""
    out_of_context: bool = False
    """The conversation outgrew the model's context window before an answer (`prediction` is then "", or what the
    agent had answered)."""
    unreadable_call: bool = False
    """The model's last reply was a tool call its server could not read and answered with an error in place of the
    reply (`UnreadableToolCall`): `prediction` is ""."""
    stop_message: str | None = None
    """What stopped the policy short of an answer, in the words of whoever stopped it: the server's context-window
    refusal or its error on a call it could not read, as it sent them, or `llm.context_window`'s check."""
    no_answer_tag: bool = False
    """The policy was to tag its answer (`agent.answer_tag`) and its final message holds no complete tag: `prediction`
    is "", as the training reward scores such a text 0."""


class Agent(Protocol):
    """A policy that answers one question with the tools it is given.

    It emits an `LLMOutputEvent` per policy step into `events` (tool call and result events come
    from the tools themselves, completion and error events from the worker). The worker may cancel
    `run` at the task's time limit; the events emitted so far are kept as the partial trajectory.

    `seed` differs per repeat of a question (`repeats=N`): a sampling policy seeds its sampling
    with it. A policy whose answers do not depend on it sets `deterministic = True`, so summaries
    say that its repeats are copies. A policy whose `run` takes no `seed` is called without it.
    """

    deterministic: bool

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult: ...


async def call_tool(tools: TaskTools, name: str, arguments: dict[str, Any]) -> ToolResult:
    """`tools.call_tool`, with an exception turned into the error result the model reads (tools should return
    errors, but one that raises must not end the task)."""
    try:
        return await tools.call_tool(name, arguments)
    except Exception as e:  # noqa: BLE001
        logger.debug("tool %s raised instead of returning an error", name, exc_info=True)
        return ToolResult(ok=False, text=f"Error: {type(e).__name__}: {e}")


def query_functions(tool_specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offered tools (their `function` objects) that take a string `query`: the search tools."""
    found = []
    for spec in tool_specs:
        function = spec.get("function", spec) if isinstance(spec, dict) else {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        query = properties.get("query") if isinstance(properties, dict) else None
        if isinstance(query, dict) and query.get("type", "string") == "string" and function.get("name"):
            found.append(function)
    return found
