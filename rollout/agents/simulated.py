"""A stand-in policy with a fixed think time per turn, for measuring the harness itself.

It costs what an LLM agent costs the harness — an await of `llm_latency_s` per turn, tool calls
through the real tool surface, events and messages of the same shape — without an endpoint or
the CPU of a heuristic, so throughput figures (e.g. `bench/harness.py`) measure the scheduler,
actors, gateway and result writing rather than a model. It never sees gold answers: its answer is
read off the first search result, or "" without one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from rollout.agents.base import AgentResult, TaskTools, query_functions
from rollout.answer_tag import refuse_answer_tag
from rollout.errors import ConfigError
from rollout.events import EventLog, LLMOutputEvent
from rollout.records import ToolResult
from rollout.wire import result_hits

logger = logging.getLogger(__name__)

ANSWER_CHARS = 80
"""Longest answer read off a result text when it has no title."""


def query_tool(tool_specs: list[dict[str, Any]]) -> str | None:
    """The first offered tool whose parameters take a string `query`."""
    found = query_functions(tool_specs)
    return str(found[0]["name"]) if found else None


def answer_from(result: ToolResult | None) -> str:
    """The first hit's title, else the start of the result's first line; "" without a usable result."""
    if result is None or not result.ok:
        return ""
    hits = result_hits(result.structured)
    if hits and hits[0].title:
        return hits[0].title
    first = next((line.strip() for line in result.text.splitlines() if line.strip()), "")
    return first[:ANSWER_CHARS]


class SimulatedAgent:
    """`turns` policy steps of `llm_latency_s` each: a search per step, then an answer (`agent=simulated`)."""

    def __init__(self, llm_latency_s: float = 0.1, turns: int = 3, call_tools: bool = True,
                 answer_tag: str | None = None) -> None:
        refuse_answer_tag(answer_tag, "agent=simulated",
                          "it reads its answer off a search result and no prompt asking for a tag")
        # Values arrive from command-line overrides as YAML scalars, so a typo can be any type.
        if isinstance(llm_latency_s, bool) or not isinstance(llm_latency_s, int | float) or llm_latency_s < 0:
            raise ConfigError(f"agent.llm_latency_s={llm_latency_s!r} must be a number of seconds, 0 or more")
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ConfigError(f"agent.turns={turns!r} must be a whole number of at least 1 (the answering turn)")
        if not isinstance(call_tools, bool):
            raise ConfigError(f"agent.call_tools={call_tools!r} must be true or false")
        self.llm_latency_s = float(llm_latency_s)
        self.turns = turns
        self.call_tools = call_tools

    deterministic = True

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": tools.system_prompt},
            {"role": "user", "content": question},
        ]
        first: ToolResult | None = None
        for turn in range(1, self.turns):
            await asyncio.sleep(self.llm_latency_s)
            name = query_tool(tools.tool_specs) if self.call_tools else None
            if name is None:
                events.emit(LLMOutputEvent(turn=turn, content="(thinking)", latency_ms=self.llm_latency_s * 1000))
                messages.append({"role": "assistant", "content": "(thinking)"})
                continue
            call_id = f"call_{turn}"
            arguments = {"query": question}
            events.emit(LLMOutputEvent(turn=turn, tool_calls=[{"id": call_id, "name": name, "arguments": arguments}],
                                       latency_ms=self.llm_latency_s * 1000))
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]})
            result = await tools.call_tool(name, dict(arguments))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result.text})
            if first is None and result.ok:
                first = result
        await asyncio.sleep(self.llm_latency_s)
        answer = answer_from(first)
        events.emit(LLMOutputEvent(turn=self.turns, content=answer, latency_ms=self.llm_latency_s * 1000))
        messages.append({"role": "assistant", "content": answer})
        logger.debug("simulated task answered %r after %d turns", answer, self.turns)
        return AgentResult(prediction=answer, turns=self.turns, messages=messages)
