"""RolloutWorker: a Ray actor that owns one HttpMCPRagEnv and runs tasks concurrently."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import ray
from hydra.utils import instantiate

from envs import HttpMCPRagEnv, TaskSession
from rollout.agents.base import Agent, AgentResult
from rollout.errors import GatewayError, ServerSetupError
from rollout.events import AnyEvent, CompletionEvent, ErrorEvent, EventLog, LLMOutputEvent
from rollout.logs import configure_ray_worker
from rollout.mcp_client.session import backoff_delay
from rollout.mcp_client.transport import is_transport_failure
from rollout.quick_start import collect_less
from rollout.records import Question, TaskResult, TaskStatus, ToolCallRecord, ToolResult, wire_task_id
from rollout.run_folder import spec_name
from rollout.wire import INFRA_OUTCOMES

logger = logging.getLogger(__name__)

LIVE_EVENT_BUFFER = 10_000
ENV_SPEC_WAIT_S = 60.0
"""How long a task waits for `use_env` on an actor started before the gateway was ready."""


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """How each worker's environment reaches the gateway: what the driver hands every actor.

    It travels to the actors (pickled by Ray) and is never written to disk: it carries the
    gateway's token, which is also kept out of its repr so no log line shows it."""

    url: str
    """The gateway's MCP endpoint."""
    gateway_config_path: str
    """The gateway file, which says which tools the environment offers."""
    system_prompt: str | None = None
    """The mode's instructions. None is passed on as None, which gives `HttpMCPEnv`'s generic prompt
    (as a config without one always did), not the RAG env's default for a missing argument."""
    call_timeout_s: float = 60.0
    """How long one tool call may wait for the gateway."""
    auth_token: str | None = field(default=None, repr=False)
    """Bearer token for the gateway (already resolved from `$ROLLOUT_GATEWAY_TOKEN` when set)."""
    reconnect_timeout_s: float = 120.0
    """How long a broken session is retried before calls fail."""
    run_id: str | None = None
    """Sent with every call, so the gateway keeps per-task state apart between runs."""

    def build(self, worker_id: str) -> HttpMCPRagEnv:
        """This spec's environment for one worker (not started)."""
        return HttpMCPRagEnv(
            self.url, self.gateway_config_path, worker_id=worker_id, system_prompt=self.system_prompt,
            call_timeout_s=self.call_timeout_s, auth_token=self.auth_token,
            reconnect_timeout_s=self.reconnect_timeout_s, run_id=self.run_id,
        )


class OfferedToolsLog:
    """A task session that remembers each tool it offered the agent (implements `TaskTools`).

    With dynamic tool sets the tools change turn by turn, and only the agent's reads of `tool_specs` say which it
    was shown: the task's record keeps their names (`TaskResult.offered_tools`), as the run's tools.json keeps
    their specs."""

    def __init__(self, session: TaskSession) -> None:
        self._session = session
        self._names: dict[str, None] = {}  # insertion-ordered set

    @property
    def names(self) -> list[str]:
        """The tools offered so far, in the order first offered."""
        return list(self._names)

    @property
    def system_prompt(self) -> str:
        return self._session.system_prompt

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        specs = self._session.tool_specs
        self._names.update(dict.fromkeys(spec_name(s) for s in specs))
        return specs

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return await self._session.call_tool(name, arguments)


class RolloutWorker:
    """Async actor: one MCP session (opened on first task), several tasks at once.

    `env_spec` may be None for an actor started while the gateway is still loading (its process and
    imports then overlap the gateway's startup); `use_env` sets it before the first task."""

    def __init__(
        self,
        worker_id: str,
        env_spec: EnvSpec | None,
        agent_spec: dict[str, Any],
        *,
        task_timeout_s: float | None = None,
        watch: bool = False,
    ):
        configure_ray_worker()  # a local Ray starts its workers without the setup hook (see rollout.run.ray_session)
        collect_less()  # the actor's process is its own, as a command's is; its MCP client's imports come next
        self.worker_id = worker_id
        self.env_spec = env_spec
        self.agent: Agent = instantiate(agent_spec)
        self._takes_seed = "seed" in inspect.signature(self.agent.run).parameters
        self.task_timeout_s = task_timeout_s
        self._env: HttpMCPRagEnv | None = None
        self._env_lock = asyncio.Lock()
        self._spec_given = asyncio.Event()
        if env_spec is not None:
            self._spec_given.set()
        # With watch on, events wait here until the driver drains them (bounded: a driver that
        # stops draining must not grow the actor without limit).
        self._live: deque[tuple[str, AnyEvent]] | None = deque(maxlen=LIVE_EVENT_BUFFER) if watch else None

    def __repr__(self) -> str:
        # Ray names the actor's forwarded log lines with this (rollout.ray_console).
        return self.worker_id

    def use_env(self, env_spec: EnvSpec) -> None:
        """Set the environment of an actor started before the gateway was ready."""
        self.env_spec = env_spec
        self._spec_given.set()

    async def _get_env(self) -> HttpMCPRagEnv:
        # An async actor may start a task before an earlier call from the same caller (use_env) has run.
        await asyncio.wait_for(self._spec_given.wait(), ENV_SPEC_WAIT_S)
        async with self._env_lock:
            if self._env is None:
                self._env = await self._open_env()
            return self._env

    async def _open_env(self) -> HttpMCPRagEnv:
        """The actor's environment, opened. A gateway that cannot be reached is waited for as an open session
        waits for one that went away (`reconnect_timeout_s`): an actor whose first task comes while the run
        restarts a dead gateway must not fail that task. A refusal (a token, a changed tool list) fails at once."""
        spec = self.env_spec
        assert spec is not None
        deadline = time.monotonic() + spec.reconnect_timeout_s
        attempt = 0
        while True:
            attempt += 1
            env = spec.build(self.worker_id)
            try:
                await env.start()
                return env
            except GatewayError as e:
                if e.__cause__ is None or not is_transport_failure(e.__cause__) or time.monotonic() > deadline:
                    raise
                delay = backoff_delay(attempt)  # as the session itself backs off when it reconnects
                # The run's log names the worker (rollout.ray_console).
                logger.warning("gateway unreachable (%s); trying again in %.1f s", e.__cause__, delay)
            await asyncio.sleep(delay)

    def _listen(self, task_id: str, event: AnyEvent) -> None:
        assert self._live is not None
        self._live.append((task_id, event))

    def drain_events(self) -> list[tuple[str, AnyEvent]]:
        """Events emitted since the last drain, as (task_id, event); empty unless watching."""
        if not self._live:
            return []
        drained = list(self._live)
        self._live.clear()
        return drained

    async def run_task(self, q: Question, attempt: int = 1, repeat: int = 0, seed: int | None = None) -> TaskResult:
        """Run one task (a question's `repeat`) to its `TaskResult`; failures and time-outs are results,
        not exceptions."""
        events = EventLog(q.id, self._listen if self._live is not None else None)
        t0 = time.perf_counter()
        outcome: AgentResult | None = None
        status: TaskStatus = "ok"
        error: str | None = None
        session: TaskSession | None = None
        offered: OfferedToolsLog | None = None
        # Only this deadline makes a "timeout": a TimeoutError from inside (the gateway not
        # answering within call_timeout_s, an agent's own wait) is that task's error.
        deadline: asyncio.Timeout | None = None
        try:
            env = await self._get_env()
            session = env.for_task(wire_task_id(q.id, repeat), events, attempt)
            if session.active_toolsets is not None:  # dynamic tool sets: what each turn offered is worth keeping
                offered = OfferedToolsLog(session)
            seeded = {"seed": seed} if self._takes_seed else {}
            # The limit runs from here, as the agent starts: waiting for the actor's session (opened by its first
            # tasks, perhaps while the gateway loads or restarts) is bounded by reconnect_timeout_s, not by it.
            deadline = asyncio.timeout(self.task_timeout_s)
            async with deadline:
                outcome = await self.agent.run(q.question, offered or session, events, **seeded)
            events.emit(CompletionEvent(prediction=outcome.prediction, turns=outcome.turns))
        except ServerSetupError:
            raise  # no task can mean anything with this server: the run stops (the scheduler hands it on)
        except Exception as e:  # noqa: BLE001 - one task's failure must not end the run
            if isinstance(e, TimeoutError) and deadline is not None and deadline.expired():
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
        calls = list(session.calls) if session else []
        offered_tools = offered.names if offered else None
        latency_s = time.perf_counter() - t0
        if error is None:
            assert outcome is not None  # no error: the agent answered
            return TaskResult.answered(
                q, prediction=outcome.prediction, turns=outcome.turns, messages=outcome.messages,
                usage=outcome.usage, calls=calls, events=events.events, worker_id=self.worker_id,
                latency_s=latency_s, attempts=attempt, repeat=repeat, seed=seed, out_of_turns=outcome.out_of_turns,
                out_of_context=outcome.out_of_context, stop_message=outcome.stop_message, offered_tools=offered_tools,
                no_answer_tag=outcome.no_answer_tag, unreadable_call=outcome.unreadable_call,
            )
        return TaskResult.failed(
            q, status=status, error=error, worker_id=self.worker_id, latency_s=latency_s, attempts=attempt,
            repeat=repeat, seed=seed, calls=calls, events=events.events,
            # An infrastructure failure after an answer keeps the answer, as the record of what the agent said.
            prediction=outcome.prediction if outcome else "",
            turns=outcome.turns if outcome else sum(isinstance(e, LLMOutputEvent) for e in events.events),
            messages=outcome.messages if outcome else [],
            usage=outcome.usage if outcome else events.usage(),  # what a cut-off task had spent
            offered_tools=offered_tools,
        )

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
