"""TaskSession: the events it emits keep what the agent read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

from envs.task_session import TaskSession
from rollout.events import EventLog, ToolResultEvent
from rollout.gateway_file import GatewayFile
from rollout.records import ToolCallRecord, ToolResult

LONG = "".join(f"[p{i}] passage {i} " + "word " * 40 + "\n" for i in range(60))
"""A tool result of about 13,000 characters, longer than any preview."""


class _Surface:
    """A tool surface whose one tool answers `LONG`."""

    gateway_config = GatewayFile(modules=[{"resource_type": "rag", "tool_groups": ["rag_query"]}])
    system_prompt = ""
    tool_specs: ClassVar[list[dict[str, Any]]] = []

    def tool_specs_for(self, active_groups: Iterable[str]) -> list[dict[str, Any]]:
        return []

    def group_of(self, tool_name: str) -> str | None:
        return "rag_query"

    async def call(self, name: str, arguments: dict[str, Any], task_id: str, call_id: str | None = None,
                   attempt: int = 1) -> tuple[ToolResult, ToolCallRecord]:
        record = ToolCallRecord(call_id=call_id or "c", name=name, arguments=arguments, ok=True, outcome="ok",
                                error=None, started=0.0, latency_ms=1.0, result_ids=["p0"], result_doc_ids=["p0"],
                                reached_gateway=True)
        return ToolResult(ok=True, text=LONG), record


def test_the_result_event_keeps_the_whole_text_the_agent_read() -> None:
    events = EventLog("q1")
    session = TaskSession(_Surface(), "q1", events)
    result = asyncio.run(session.call_tool("query_knowledge_base_dense", {"query": "x"}))
    [event] = [e for e in events.events if isinstance(e, ToolResultEvent)]
    assert len(LONG) > 10_000
    assert result.text == LONG
    assert event.text == LONG
