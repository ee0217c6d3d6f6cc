"""Where a run's wall time goes: seconds since its start at each step, logged as one line at the end."""

from __future__ import annotations

import time


class Timeline:
    """The run's steps (data, ray up, gateway ready, tools listed, first result, all results, scored, stopped)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.started_at = time.time()
        """The start as Unix time, the clock the gateway's ledger lines are stamped with."""
        self.marks: dict[str, float] = {}

    def mark(self, step: str) -> None:
        self.marks[step] = time.perf_counter() - self.started

    def mark_once(self, step: str) -> None:
        self.marks.setdefault(step, time.perf_counter() - self.started)

    def line(self) -> str:
        return " · ".join(f"{step} {at:.1f}" for step, at in self.marks.items())
