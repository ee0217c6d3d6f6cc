"""The queries `POST /retrieve` works on at once, and the requests waiting for their turn.

Trainers' retrieval clients (Search-R1's) send thousands of queries per request and do not retry a refused
one: a 429 fails the training step. So a request that would take the gateway over its bound waits, in arrival
order, until its queries fit, and only one still waiting after `max_wait_s` is refused. The order is strict
(first come, first served): a request never overtakes an earlier one, so a big request is not starved by a
stream of small ones that would each fit sooner.

A waiting request holds nothing: its queries count only once admitted, so one that gives up (its client
went away, or its time ran out) leaves the queue and frees nothing it did not take.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio

Admission = Literal["admitted", "timed_out", "gone"]
"""How a wait ended: the queries count as in flight until `release`; the wait ran out; the client went away."""


@dataclass(slots=True)
class _Waiter:
    queries: int
    granted: anyio.Event = field(default_factory=anyio.Event)


@dataclass(slots=True)
class QueryQueue:
    """At most `capacity` queries in flight; requests past it wait first come, first served, up to `max_wait_s`.

    Used from one event loop: counts change only between awaits, so no lock is needed."""

    capacity: int
    max_wait_s: float
    in_flight: int = 0
    """Queries admitted and not yet released."""
    _waiting: deque[_Waiter] = field(default_factory=deque)

    @property
    def queued(self) -> int:
        """Queries of the requests waiting for their turn."""
        return sum(w.queries for w in self._waiting)

    async def acquire(self, queries: int, gone: Callable[[], Awaitable[None]]) -> Admission:
        """Count `queries` in flight, at once or after the requests ahead of them; `gone` returns when the
        client has gone away. `queries` must be at most `capacity` (a request larger could never fit)."""
        if queries > self.capacity:
            raise ValueError(f"{queries} queries can never fit in {self.capacity}")
        if not self._waiting and self.in_flight + queries <= self.capacity:
            self.in_flight += queries
            return "admitted"
        waiter = _Waiter(queries)
        self._waiting.append(waiter)
        outcome: Admission = "timed_out"
        admitted = False
        try:
            with anyio.move_on_after(self.max_wait_s):
                async with anyio.create_task_group() as tg:
                    async def until_granted() -> None:
                        await waiter.granted.wait()
                        tg.cancel_scope.cancel()

                    async def until_gone() -> None:
                        nonlocal outcome
                        await gone()
                        outcome = "gone"
                        tg.cancel_scope.cancel()

                    tg.start_soon(until_granted)
                    tg.start_soon(until_gone)
            # A grant that came with the deadline counts (the queries fit now); one that came as the client left
            # does not.
            admitted = waiter.granted.is_set() and outcome != "gone"
            return "admitted" if admitted else outcome
        finally:
            if not waiter.granted.is_set():
                self._waiting.remove(waiter)
                self._admit_waiting()  # it may have been the one the others waited behind
            elif not admitted:
                self.release(queries)  # granted, then the client left (or the server stopped): give it back

    def release(self, queries: int) -> None:
        """The `queries` of an admitted request are answered: admit the waiting requests that now fit, in order."""
        self.in_flight -= queries
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self._waiting and self.in_flight + self._waiting[0].queries <= self.capacity:
            waiter = self._waiting.popleft()
            self.in_flight += waiter.queries
            waiter.granted.set()

