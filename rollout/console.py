"""The console every command prints its tables with: on a terminal, its width; piped or redirected, tables whole.

Off a terminal rich lays everything out at 80 columns (or `$COLUMNS`), so a table wider than
that has its headers and cells cut to `rec…` in a file. There is no screen to fit in a file:
`ReadableConsole` prints each table at its natural width there instead. Other output (rules,
sentences) keeps a fixed width off a terminal, so a file reads the same whatever window ran it.

Lives at the package root rather than in `rollout.view` because `rollout.report` prints with it
too, and `rollout.view` already imports from `rollout.report`.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

PIPE_WIDTH = 160
"""Width of everything but tables when the output is not a terminal and `$COLUMNS` is unset."""
_UNBOUNDED = 1 << 20
"""Room a table is measured in: wide enough for any cell a command prints."""


class ReadableConsole(Console):
    """A rich Console that, when its output is not a terminal, prints each table at its natural width."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not self.is_terminal and kwargs.get("width") is None and not os.environ.get("COLUMNS"):
            self.width = PIPE_WIDTH

    def natural_width(self, table: Table) -> int:
        """Columns `table` takes when nothing is wrapped, folded or cut."""
        return Measurement.get(self, self.options.update_width(_UNBOUNDED), table).maximum

    def print(self, *objects: Any, **kwargs: Any) -> None:
        width = self.width
        if not self.is_terminal:
            width = max([width, *(self.natural_width(o) for o in objects if isinstance(o, Table))])
        if width == self.width:
            super().print(*objects, **kwargs)
            return
        # Console.print caps every width at the console's own, so widen the console for this call.
        saved, self.width = self.width, width
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = saved


def percent(value: float | None) -> str:
    """A share as the report tables print it, e.g. "66.7%"; "-" without a value."""
    return "-" if value is None else f"{100 * value:.1f}%"
