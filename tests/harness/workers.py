"""Worker actors that misbehave on purpose, for the scheduler's tests (imported inside Ray workers)."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from rollout.events import AnyEvent, CompletionEvent, EventLog, LLMOutputEvent
from rollout.records import Question, TaskResult
from rollout.run.scheduler import POLL_S


@ray.remote(num_cpus=0)
class LateDrainingWorker:
    """Answers each task at once, but each drain of its live events only after the scheduler stopped waiting for
    it (POLL_S), as a busy worker on a loaded machine does: what it drains comes back late."""

    def __init__(self) -> None:
        self._live: list[tuple[str, AnyEvent]] = []

    def use_env(self, env_spec: Any) -> None:
        pass

    async def run_task(self, q: Question, attempt: int = 1, repeat: int = 0, seed: int | None = None) -> TaskResult:
        events = EventLog(q.id, lambda task_id, event: self._live.append((task_id, event)))
        events.emit(LLMOutputEvent(turn=1, content=q.question))
        events.emit(CompletionEvent(prediction="x", turns=1))
        return TaskResult.answered(q, prediction="x", turns=1, messages=[], usage={}, calls=[], events=events.events,
                                   worker_id="late", latency_s=0.0, attempts=attempt, repeat=repeat, seed=seed)

    async def drain_events(self) -> list[tuple[str, AnyEvent]]:
        await asyncio.sleep(1.5 * POLL_S)
        drained, self._live = self._live, []
        return drained

    async def close(self) -> None:
        pass
