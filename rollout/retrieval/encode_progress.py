"""How far an encoding on Ray is, as a log line a person reads: passages encoded, rate, time left.

Encoding 21M passages takes hours, and Ray Data's own progress bars (off: `rollout.retrieval.ray_build`) redraw
every few seconds in a format of their own. `EncodeProgress` logs one line when the first shards are done (the rate
is known then) and then at most one every `every_s` seconds:

    Encoded 1,310,720 of 21,015,324 passages (6%): 2,184 passages/s, about 2 h 30 min left

The rate is over the whole encoding so far, the actors' start included, so the time left is what the build has shown
it takes, not a burst.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

EVERY_S = 60.0
"""Seconds between two progress lines."""


def time_left(seconds: float) -> str:
    """`45 s`, `12 min`, `2 h 05 min`: the precision a wait of that length wants."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class EncodeProgress:
    """Counts the passages encoded of `total` and logs how far it is, rate-limited (see the module docstring)."""

    def __init__(self, total: int, *, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.every_s = every_s
        self.clock = clock
        self.done = 0
        self.started = clock()
        self.logged: float | None = None
        """When the last line was logged; None before the first."""

    def add(self, rows: int) -> None:
        """`rows` more passages are encoded: log a line if one is due (none once all are done: the build says so)."""
        self.done += rows
        now = self.clock()
        if self.done >= self.total or (self.logged is not None and now - self.logged < self.every_s):
            return
        self.logged = now
        logger.info("%s", self.line(now))

    def line(self, now: float) -> str:
        """The line at `now`: done of total, the rate so far, the time the rest takes at that rate."""
        rate = self.done / max(now - self.started, 1e-9)
        shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"
        return (f"Encoded {self.done:,} of {self.total:,} passages ({self.done * 100 // self.total}%): {shown} "
                f"passages/s, about {time_left((self.total - self.done) / rate)} left")
