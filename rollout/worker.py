"""RolloutWorker: a Ray actor that owns one HttpMCPRagEnv and runs tasks concurrently."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray
from hydra.utils import instantiate

from envs import HttpMCPRagEnv
from rollout.agents.base import Agent
from rollout.data.records import Question
from rollout.records import TaskResult

logger = logging.getLogger(__name__)


class RolloutWorker:
    """Async actor: one MCP session (opened on first task), several tasks at once."""

    def __init__(self, worker_id: str, env_kwargs: dict[str, Any], agent_spec: dict[str, Any]):
        self.worker_id = worker_id
        self.env_kwargs = env_kwargs
        self.agent: Agent = instantiate(agent_spec)
        self._env: HttpMCPRagEnv | None = None
        self._env_lock = asyncio.Lock()

    async def _get_env(self) -> HttpMCPRagEnv:
        async with self._env_lock:
            if self._env is None:
                env = HttpMCPRagEnv(worker_id=self.worker_id, **self.env_kwargs)
                await env.start()
                self._env = env
            return self._env

    async def run_task(self, question: dict[str, Any]) -> dict[str, Any]:
        q = Question(**question)
        t0 = time.perf_counter()
        prediction, turns, error, messages, calls = "", 0, None, [], []
        try:
            env = await self._get_env()
            session = env.for_task(q.id)
            try:
                result = await self.agent.run(q.question, session)
                prediction, turns, messages = result.prediction, result.turns, result.messages
            finally:
                calls = [c.to_json() for c in session.calls]
        except Exception as e:  # one task's failure must not end the run
            logger.warning("task %s failed: %s", q.id, e)
            error = f"{type(e).__name__}: {e}"
        return TaskResult(
            id=q.id,
            question=q.question,
            golden_answers=list(q.golden_answers),
            prediction=prediction,
            tool_calls=calls,
            turns=turns,
            error=error,
            worker_id=self.worker_id,
            latency_s=time.perf_counter() - t0,
            metadata=dict(q.metadata),
            messages=messages,
        ).to_json()

    async def close(self) -> None:
        if self._env is not None:
            await self._env.close()
            self._env = None


# Tasks wait on the gateway, not the CPU: actors reserve no cores so any count fits.
RolloutWorkerActor = ray.remote(num_cpus=0)(RolloutWorker)
