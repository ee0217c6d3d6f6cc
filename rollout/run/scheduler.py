"""Feed tasks to the Ray actors and survive what goes wrong while they run.

Each actor runs up to `concurrency_per_worker` tasks at once. Finished tasks go to `on_result` as
they arrive (the driver appends and flushes them), so nothing finished waits in memory. When an
actor dies, its in-flight tasks go back to the queue and a fresh actor takes its place; a task that
has killed `MAX_ATTEMPTS` actors is recorded as an error. When the gateway the run started dies (or
stops answering its health checks, see `GatewayProcess.is_alive`), it is restarted on the same port,
on a thread of its own so the loop keeps collecting results and Ctrl-C stays prompt, and the
workers' environments reconnect on their own.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import ray
from ray.exceptions import RayActorError, RayTaskError

from rollout.errors import GatewayError, ServerSetupError
from rollout.events import AnyEvent
from rollout.records import Question, TaskResult
from rollout.run.config import WorkerPool
from rollout.run.worker import EnvSpec, RolloutWorkerActor

logger = logging.getLogger(__name__)

# Shutdown is best effort: a dead or stuck actor must not hide the run's own outcome.
_ignore_ray_errors = contextlib.suppress(ray.exceptions.RayError)

MAX_ATTEMPTS = 3
"""Times a task is started before a dying worker under it is taken as the task's own fault."""
MAX_GATEWAY_RESTARTS = 5
POLL_S = 0.5
"""How often the loop looks at the gateway and drains live events while waiting for results."""


class Gateway(Protocol):
    """What the scheduler needs of the run's gateway."""

    def is_alive(self) -> bool: ...

    def restart(self) -> str: ...


class _CtrlC:
    """Ctrl-C presses noted by a SIGINT handler, for the loop to act on between its steps."""

    def __init__(self) -> None:
        self.pressed = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.pressed:  # pressed twice: stop wherever the loop is
            raise KeyboardInterrupt
        self.pressed = True

    def raise_if_pressed(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _ctrl_c_between_steps() -> Iterator[_CtrlC]:
    """Turn Ctrl-C into a KeyboardInterrupt at the top of the scheduling loop.

    Python raises it wherever the main thread is, which here is mostly inside Ray's calls
    (`ray.wait`, `ray.get`); a loop step takes at most POLL_S plus a result's handling, so
    a press still stops the run promptly, at a point where nothing is half done. Off the main
    thread (no signal handler can be set there) Python's default applies.
    """
    ctrl_c = _CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield ctrl_c
        return
    previous = signal.signal(signal.SIGINT, ctrl_c.handle)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(slots=True)
class _Slot:
    """One actor and the tasks it is running."""

    worker_id: str
    actor: Any
    running: int = 0


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """One run of one question: what the scheduler hands a worker."""

    question: Question
    repeat: int = 0
    """Which of the run's `repeats` this is (0-based)."""
    seed: int | None = None
    """Seed for a sampling agent on this repeat."""

    def failed(self, error: str, attempts: int) -> TaskResult:
        """The record of this task when no worker could finish it."""
        return TaskResult.failed(self.question, status="error", error=error, attempts=attempts, repeat=self.repeat,
                                 seed=self.seed)


class _Queue:
    """Tasks still to start: tasks to start again first, then the planned ones, drawn one at a time."""

    def __init__(self, planned: Iterable[PlannedTask]):
        self._planned = iter(planned)
        self._retries: deque[tuple[PlannedTask, int]] = deque()
        self._next: PlannedTask | None = None
        self._exhausted = False

    def __bool__(self) -> bool:
        if self._retries or self._next is not None:
            return True
        if not self._exhausted:
            self._next = next(self._planned, None)
            self._exhausted = self._next is None
        return self._next is not None

    def pop(self) -> tuple[PlannedTask, int]:
        """The next task and its attempt number (call only when the queue is true)."""
        if self._retries:
            return self._retries.popleft()
        task, self._next = self._next, None
        assert task is not None, "pop() from an empty queue"
        return task, 1

    def retry(self, task: PlannedTask, attempt: int) -> None:
        """Start `task` again before any other (its worker died under it)."""
        self._retries.appendleft((task, attempt))


def new_actor(pool: WorkerPool, worker_id: str, env_spec: EnvSpec | None) -> Any:
    """A rollout worker actor (its process starts now; without `env_spec` it waits for `use_env`)."""
    return RolloutWorkerActor.remote(
        worker_id, env_spec, pool.agent, task_timeout_s=pool.task_timeout_s, watch=pool.watch
    )


def start_actors(pool: WorkerPool, count: int) -> list[Any]:
    """`count` workers started before the gateway is ready, so their start overlaps its loading."""
    return [new_actor(pool, f"worker-{i}", None) for i in range(count)]


class _Drain:
    """One `drain_events` call to each worker, and the finished tasks whose events it hands on."""

    def __init__(self, calls: list[ray.ObjectRef], covers: list[ray.ObjectRef]) -> None:
        self._calls = calls
        self.covers = covers

    def hand_on(self, on_events: Callable[[list[tuple[str, AnyEvent]]], None], timeout_s: float) -> bool:
        """Pass on what the calls answered so far, waiting up to `timeout_s`; True once every call has answered.

        Each worker has one drain at a time, so its events go on in the order it emitted them. A worker that died
        answers with an error: its events are lost with it, and its tasks are started again."""
        if not self._calls:
            return True
        ready, self._calls = ray.wait(self._calls, num_returns=len(self._calls), timeout=timeout_s,
                                      fetch_local=True)
        events = []
        for call in ready:
            with _ignore_ray_errors:
                events.extend(ray.get(call))
        if events:
            on_events(events)
        return not self._calls


class Scheduler:
    """Runs questions on a pool of actors; see the module docstring."""

    def __init__(
        self,
        pool: WorkerPool,
        env_spec: EnvSpec,
        *,
        on_result: Callable[[TaskResult], None],
        gateway: Gateway | None = None,
        on_events: Callable[[list[tuple[str, AnyEvent]]], None] | None = None,
        actors: Sequence[Any] = (),
    ):
        """`actors` are workers already started by `start_actors` (without an environment); the run uses
        them first and gives them `env_spec`."""
        self.pool = pool
        self.env_spec = env_spec
        self.on_result = on_result
        self.gateway = gateway
        self.on_events = on_events
        self.gateway_restarts = 0
        self.actor_restarts = 0
        self._restarting: threading.Thread | None = None
        self._restart_error: BaseException | None = None
        self._slots: list[_Slot] = []
        self._pending: dict[ray.ObjectRef, tuple[_Slot, Any, PlannedTask, int]] = {}
        """In-flight tasks: the slot, the actor it was sent to, the task and its attempt."""
        self._prestarted = list(actors)
        self._unheard: dict[ray.ObjectRef, None] = {}
        """Finished tasks, in the order they finished, held back until a drain started after they finished has handed on their events."""
        self._drain: _Drain | None = None

    def _new_actor(self, worker_id: str) -> Any:
        return new_actor(self.pool, worker_id, self.env_spec)

    def run(self, tasks: Iterable[PlannedTask], count: int | None = None) -> None:
        """Run every task to a result (or until interrupted: KeyboardInterrupt propagates).

        `tasks` is drawn from as slots free up, so it may be a generator over a million questions; `count` is
        how many it holds when it has no `len`."""
        n_tasks = len(tasks) if isinstance(tasks, Sized) else count
        if n_tasks is None:
            raise TypeError("Scheduler.run needs count= when tasks is an iterator")
        queue = _Queue(tasks)
        n_workers = max(1, min(self.pool.workers, n_tasks)) if n_tasks else 0
        for actor in self._prestarted:
            actor.use_env.remote(self.env_spec)  # before any task: Ray runs one caller's calls in order
        self._slots = [
            _Slot(f"worker-{i}", self._prestarted[i] if i < len(self._prestarted) else self._new_actor(f"worker-{i}"))
            for i in range(max(n_workers, len(self._prestarted)))
        ]
        try:
            with _ctrl_c_between_steps() as ctrl_c:
                while queue or self._pending:
                    ctrl_c.raise_if_pressed()
                    self._fill(queue)
                    for ref in self._finished_and_heard():
                        self._collect(ref, queue)
                    self._watch_gateway()
                self._drain_events()
        finally:
            self._shutdown()

    def _fill(self, queue: _Queue) -> None:
        for slot in self._slots:
            while slot.running < self.pool.concurrency_per_worker and queue:
                task, attempt = queue.pop()
                ref = slot.actor.run_task.remote(task.question, attempt, task.repeat, task.seed)
                self._pending[ref] = (slot, slot.actor, task, attempt)
                slot.running += 1

    def _finished_and_heard(self) -> list[ray.ObjectRef]:
        """Finished tasks whose events have all gone to `on_events`, in the order they finished.

        A finished task's events are all in its worker's buffer: a drain started after it finished hands them on,
        so its record waits for that drain. A drain that takes longer than POLL_S (a busy worker, a loaded
        machine) is waited for again at the next step, never dropped: what it took from the buffer exists
        nowhere else."""
        finished = self._finished()
        if self.on_events is None:
            return finished
        self._unheard.update(dict.fromkeys(finished))
        if self._drain is None:
            self._drain = _Drain([slot.actor.drain_events.remote() for slot in self._slots], list(self._unheard))
        if not self._drain.hand_on(self.on_events, POLL_S):
            return []
        heard, self._drain = self._drain.covers, None
        for ref in heard:
            del self._unheard[ref]
        return heard

    def _finished(self) -> list[ray.ObjectRef]:
        """Results ready now: waits for the first (at most POLL_S), then takes every other one ready."""
        pending = [ref for ref in self._pending if ref not in self._unheard]
        if not pending:
            return []
        first, rest = ray.wait(pending, num_returns=1, timeout=POLL_S, fetch_local=False)
        if not first or not rest:
            return first
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)
        return first + more

    def _collect(self, ref: ray.ObjectRef, queue: _Queue) -> None:
        slot, actor, task, attempt = self._pending.pop(ref)
        try:
            result: TaskResult = ray.get(ref)
        except RayActorError as e:
            self._replace_if_current(slot, actor, e)
            if attempt < MAX_ATTEMPTS:
                logger.warning("task %s lost with its worker; starting it again (attempt %d)", task.question.id,
                               attempt + 1)
                queue.retry(task, attempt + 1)
                return
            result = task.failed(f"worker died under this task {attempt} times: {type(e).__name__}", attempt)
        except ray.exceptions.RayError as e:  # run_task catches task failures; this is Ray's own
            if isinstance(e, RayTaskError) and isinstance(e.cause, ServerSetupError):
                raise e.cause from None  # the run cannot go on; the task is not recorded, so a rerun asks it again
            result = task.failed(f"worker failed: {e}", attempt)
        if slot.actor is actor:
            slot.running -= 1
        self.on_result(result)

    def _replace_if_current(self, slot: _Slot, actor: Any, error: Exception) -> None:
        """Start a fresh actor in a dead one's place (once, whichever of its tasks reports first)."""
        if slot.actor is not actor:
            return
        logger.warning("%s died (%s); starting a replacement", slot.worker_id, type(error).__name__)
        with _ignore_ray_errors:
            ray.kill(actor)
        slot.actor = self._new_actor(slot.worker_id)
        slot.running = 0  # the dead actor's other tasks report (and are requeued) one by one
        self.actor_restarts += 1

    def _drain_events(self) -> None:
        """Hand on the events still in the workers' buffers, waiting at most POLL_S."""
        if self.on_events is not None:
            _Drain([slot.actor.drain_events.remote() for slot in self._slots], []).hand_on(self.on_events, POLL_S)

    def _watch_gateway(self) -> None:
        """Notice a dead gateway and restart it in the background; raise if restarting failed."""
        if self._restarting is not None:
            if self._restarting.is_alive():
                return
            self._restarting = None
            if (error := self._restart_error) is not None:
                raise GatewayError(f"the gateway could not be restarted: {error}. "
                                   "Rerun the same command to resume the finished tasks") from error
        if self.gateway is None or self.gateway.is_alive():
            return
        if self.gateway_restarts >= MAX_GATEWAY_RESTARTS:
            raise GatewayError(
                f"the gateway died {self.gateway_restarts + 1} times; its log above says why. "
                "Rerun the same command to resume the finished tasks"
            )
        self.gateway_restarts += 1
        logger.warning("The gateway died; restarting it on the same port (restart %d)", self.gateway_restarts)
        self._restart_error = None
        self._restarting = threading.Thread(target=self._restart, args=(self.gateway,), name="gateway-restart",
                                            daemon=True)
        self._restarting.start()

    def _restart(self, gateway: Gateway) -> None:
        t0 = time.perf_counter()
        try:
            gateway.restart()
        except BaseException as e:  # noqa: BLE001 - reported by the loop, which owns the run's outcome
            self._restart_error = e
            return
        logger.warning("Gateway back after %.1f s; workers reconnect", time.perf_counter() - t0)

    def _shutdown(self) -> None:
        closing = [slot.actor.close.remote() for slot in self._slots]
        with _ignore_ray_errors:
            ray.get(closing, timeout=10)
        for slot in self._slots:
            with _ignore_ray_errors:
                ray.kill(slot.actor)
        self._slots = []
