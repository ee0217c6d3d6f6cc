"""RolloutWorker: a Ray actor that owns one HttpMCPRagEnv and runs tasks concurrently."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter, deque
from typing import Any

import ray
from hydra.utils import instantiate

from envs import HttpMCPRagEnv, TaskSession
from rollout.agents.base import Agent, AgentResult
from rollout.errors import GatewayError
from rollout.events import CompletionEvent, ErrorEvent, Event, EventLog, LLMOutputEvent
from rollout.records import Question, TaskResult, TaskStatus, ToolCallRecord, wire_task_id
from rollout.wire import INFRA_OUTCOMES

logger = logging.getLogger(__name__)

LIVE_EVENT_BUFFER = 10_000


class RolloutWorker:
    """Async actor: one MCP session (opened on first task), several tasks at once."""

    def __init__(
        self,
        worker_id: str,
        env_kwargs: dict[str, Any],
        agent_spec: dict[str, Any],
        *,
        task_timeout_s: float | None = None,
        watch: bool = False,
    ):
        self.worker_id = worker_id
        self.env_kwargs = env_kwargs
        self.agent: Agent = instantiate(agent_spec)
        self._takes_seed = "seed" in inspect.signature(self.agent.run).parameters
        self.task_timeout_s = task_timeout_s
        self._env: HttpMCPRagEnv | None = None
        self._env_lock = asyncio.Lock()
        # With watch on, events wait here until the driver drains them (bounded: a driver that
        # stops draining must not grow the actor without limit).
        self._live: deque[tuple[str, dict[str, Any]]] | None = deque(maxlen=LIVE_EVENT_BUFFER) if watch else None

    async def _get_env(self) -> HttpMCPRagEnv:
        async with self._env_lock:
            if self._env is None:
                env = HttpMCPRagEnv(worker_id=self.worker_id, **self.env_kwargs)
                await env.start()
                self._env = env
            return self._env

    def _listen(self, task_id: str, event: Event) -> None:
        assert self._live is not None
        self._live.append((task_id, event.to_json()))

    def drain_events(self) -> list[tuple[str, dict[str, Any]]]:
        """Events emitted since the last drain, as (task_id, event dict); empty unless watching."""
        if not self._live:
            return []
        drained = list(self._live)
        self._live.clear()
        return drained

    async def run_task(
        self, question: dict[str, Any], attempt: int = 1, repeat: int = 0, seed: int | None = None
    ) -> dict[str, Any]:
        """Run one task (a question's `repeat`) to a `TaskResult` dict; failures and time-outs are results,
        not exceptions."""
        q = Question(**question)
        events = EventLog(q.id, self._listen if self._live is not None else None)
        t0 = time.perf_counter()
        outcome: AgentResult | None = None
        status: TaskStatus = "ok"
        error: str | None = None
        session: TaskSession | None = None
        # Only this deadline makes a "timeout": a TimeoutError from inside (the gateway not
        # answering within call_timeout_s, an agent's own wait) is that task's error.
        deadline = asyncio.timeout(self.task_timeout_s)
        try:
            env = await self._get_env()
            session = env.for_task(wire_task_id(q.id, repeat), events, attempt)
            seeded = {"seed": seed} if self._takes_seed else {}
            async with deadline:
                outcome = await self.agent.run(q.question, session, events, **seeded)
            events.emit(CompletionEvent(prediction=outcome.prediction, turns=outcome.turns))
        except Exception as e:  # one task's failure must not end the run
            if isinstance(e, TimeoutError) and deadline.expired():
                status, error = "timeout", f"task exceeded its time limit of {self.task_timeout_s:g} s (task_timeout_s)"
            elif session is None and isinstance(e, GatewayError):
                # No MCP session could be opened: the gateway is down, whatever the agent would have done.
                logger.warning("task %s could not reach the gateway: %s", q.id, e)
                status, error = "infra_error", f"{type(e).__name__}: {e}"
            else:
                logger.warning("task %s failed: %s", q.id, e)
                status, error = "error", f"{type(e).__name__}: {e}"
            events.emit(ErrorEvent(kind=status, message=error))
        if status != "timeout" and session is not None and (infra := infra_failure(session.calls)):
            # Whatever the agent answered, it did so without evidence it asked for.
            status, error = "infra_error", infra if error is None else f"{infra}; then {error}"
            events.emit(ErrorEvent(kind=status, message=infra))
        return TaskResult(
            id=q.id,
            question=q.question,
            golden_answers=list(q.golden_answers),
            prediction=outcome.prediction if outcome else "",
            tool_calls=[c.to_json() for c in session.calls] if session else [],
            turns=outcome.turns if outcome else sum(isinstance(e, LLMOutputEvent) for e in events.events),
            error=error,
            worker_id=self.worker_id,
            latency_s=time.perf_counter() - t0,
            metadata=dict(q.metadata),
            messages=outcome.messages if outcome else [],
            status=status,
            usage=dict(outcome.usage) if outcome else events.usage(),  # what a cut-off task had spent
            events=events.to_json(),
            attempts=attempt,
            repeat=repeat,
            seed=seed,
        ).to_json()

    async def close(self) -> None:
        if self._env is not None:
            await self._env.close()
            self._env = None


def infra_failure(calls: list[ToolCallRecord]) -> str | None:
    """Why a task's tool calls say the tool infrastructure failed it, or None when they do not."""
    failed = [c for c in calls if c.outcome in INFRA_OUTCOMES]
    if not failed:
        return None
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(Counter(c.outcome for c in failed).items()))
    return f"{len(failed)} of {len(calls)} tool calls failed in the tool infrastructure ({outcomes}): {failed[-1].error}"


# Tasks wait on the gateway, not the CPU: actors reserve no cores so any count fits.
RolloutWorkerActor = ray.remote(num_cpus=0)(RolloutWorker)
