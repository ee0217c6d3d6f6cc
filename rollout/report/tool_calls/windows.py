"""How a training run's tool calls are cut into windows (`rollout report tool-stats --by step|time`): by trainer step
or by time, the window's size as `--window` gives it, and the traffic counted. No pandas here: the report command
reads its options with these before it loads any calls (`rollout.report.tool_calls.use`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rollout.errors import ReportError

By = Literal["step", "time"]
Traffic = Literal["train", "eval", "all"]
BY_CHOICES: tuple[By, ...] = ("step", "time")
TRAFFIC_CHOICES: tuple[Traffic, ...] = ("all", "train", "eval")
DEFAULT_WINDOW = {"step": "1", "time": "60s"}
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Windowing:
    """How calls are cut: `by` step or time, `size` steps or seconds per window."""

    by: By
    size: float

    @property
    def unit(self) -> str:
        return "steps" if self.by == "step" else "seconds"

    def describe(self) -> str:
        """"1 step", "10 steps", "60s", "5m"."""
        if self.by == "step":
            return f"{self.size:g} step{'s' if self.size != 1 else ''}"
        return duration(self.size)


def parse_window(by: By, text: str | None) -> Windowing:
    """`--window` as given (None: the default of `by`): a whole number of steps, or seconds with an optional unit."""
    text = (text or DEFAULT_WINDOW[by]).strip()
    if by == "step":
        if not text.isdigit() or int(text) < 1:
            raise ReportError(f"--window {text}: with --by step give a whole number of steps, e.g. --window 10")
        return Windowing("step", int(text))
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise ReportError(f"--window {text}: with --by time give seconds (90) or a number with s, m or h (90s, 5m, 1h)")
    return Windowing("time", float(m.group(1)) * _UNITS[m.group(2)])


def duration(seconds: float) -> str:
    """Seconds as the labels show them: 45s, 5m, 2h, 1h30m, 90.5s."""
    if seconds and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 3600 and seconds % 60 == 0:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60)}m"
    if seconds and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
