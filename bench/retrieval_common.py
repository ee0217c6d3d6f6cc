"""Shared pieces of the retrieval benchmark: table rows, timing, and steps measured in fresh processes.

Memory: a step's peak RSS delta is the process's peak resident set during the step (VmHWM,
reset through /proc/self/clear_refs just before the step; ru_maxrss where that reset is
refused) minus its resident set just before the step.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any, TypeVar

K = 10
"""Passages per query in every measurement."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Step:
    """One measured step of a child process."""

    seconds: float
    """Wall time of the step alone."""
    peak_rss_mib: float
    """Peak resident set during the step minus the resident set before it."""


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the printed table."""

    area: str
    measurement: str
    value: str
    memory: str = ""
    target: str = ""


def _status_mib(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} missing from /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(fn: Callable[[], _T]) -> tuple[_T, Step]:
    before = _status_mib("VmRSS")
    reset = _reset_peak()
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    peak = _status_mib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result, Step(seconds, max(0.0, peak - before))


def in_child(fn: Callable[..., _T], *args: Any) -> _T:
    """Run `fn(*args)` in a fresh spawned process (fresh memory, nothing cached in-process)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def median_in_children(fn: Callable[..., Step], *args: Any, runs: int = 3) -> Step:
    """The median-time step of `runs` fresh processes."""
    steps = sorted((in_child(fn, *args) for _ in range(runs)), key=lambda step: step.seconds)
    return steps[len(steps) // 2]


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    """Seconds of the fastest of `repeat` calls."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def print_table(header: str, columns: tuple[str, ...], cells: list[tuple[str, ...]]) -> None:
    """`header`, then the cells under `columns`: the first two columns left-aligned, the rest right-aligned."""
    rows = [columns, *cells]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = [header, ""]
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    print("\n".join(lines), flush=True)
