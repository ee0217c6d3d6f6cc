"""Policies that misbehave on purpose, for the fault tests (imported inside Ray workers)."""

from __future__ import annotations

import os
from pathlib import Path

from rollout.agents.base import AgentResult, TaskTools
from rollout.events import EventLog, LLMOutputEvent


class CrashOnceAgent:
    """Kills its worker process the first time it sees `question`; answers "" otherwise."""

    def __init__(self, question: str, marker: str) -> None:
        self.question = question
        self.marker = Path(marker)

    async def run(self, question: str, tools: TaskTools, events: EventLog) -> AgentResult:
        if question == self.question and not self.marker.exists():
            self.marker.write_text("crashed")
            os._exit(1)  # the actor dies with every task it was running
        events.emit(LLMOutputEvent(turn=1, content="pass"))
        return AgentResult(prediction="pass", turns=1, messages=[])
