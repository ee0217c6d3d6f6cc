"""Policies that misbehave on purpose, for the fault tests (imported inside Ray workers)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from rollout.agents.base import AgentResult, TaskTools
from rollout.agents.simulated import SimulatedAgent
from rollout.events import EventLog, LLMOutputEvent

FAIL_ONCE_ENV = "ROLLOUT_TEST_FAIL_ONCE"
"""A file `FailOnceAgent` creates as it fails a task (workers inherit the run's environment)."""


class CrashOnceAgent:
    """Searches, then kills its worker process the first time it sees `question`; answers "pass" otherwise."""

    def __init__(self, question: str, marker: str) -> None:
        self.question = question
        self.marker = Path(marker)

    async def run(self, question: str, tools: TaskTools, events: EventLog) -> AgentResult:
        await tools.call_tool("query_knowledge_base_sparse", {"query": question})
        if question == self.question and not self.marker.exists():
            self.marker.write_text("crashed")
            os._exit(1)  # the actor dies with every task it was running
        events.emit(LLMOutputEvent(turn=1, content="pass"))
        return AgentResult(prediction="pass", turns=1, messages=[])


class InnerTimeoutAgent:
    """Searches once, then a wait of its own runs out (as an agent's own time limit would)."""

    async def run(self, question: str, tools: TaskTools, events: EventLog) -> AgentResult:
        await tools.call_tool("query_knowledge_base_sparse", {"query": question})
        await asyncio.wait_for(asyncio.Event().wait(), timeout=0.05)
        raise AssertionError("unreachable: the wait above always times out")


class FailOnceAgent(SimulatedAgent):
    """The simulated policy, except that while `$ROLLOUT_TEST_FAIL_ONCE` names a file not there yet, the first task
    to start creates it and fails (its worker logs a warning)."""

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult:
        if marker := os.environ.get(FAIL_ONCE_ENV):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                raise RuntimeError("failing once on purpose")
        return await super().run(question, tools, events, seed=seed)
