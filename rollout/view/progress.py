"""The run's progress bar: done/total, running EM over `ok` tasks, failures, tool calls per second, and the LLM
requests that timed out, were retried or were slow so far (`rollout.llm.trouble`), when there were any."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from rollout.llm.trouble import LLMTroubleLog
from rollout.records import TaskResult
from rollout.report.metrics import exact_match


class LLMTroubleColumn(ProgressColumn):
    """E.g. "3 LLM timeouts, 5 retries, 2 slow calls", read at each refresh: they happen while tasks run, not as
    they finish, and a server that makes every request slow finishes no task for minutes."""

    def __init__(self, trouble: LLMTroubleLog) -> None:
        super().__init__()
        self.trouble = trouble

    def render(self, task: Task) -> Text:
        return Text(self.trouble.progress_text(), style="yellow")


class RunProgress:
    """Counts finished tasks and shows them; a disabled one only counts."""

    def __init__(self, total: int, already_done: int = 0, *, enabled: bool = True, console: Console | None = None,
                 llm: LLMTroubleLog | None = None):
        self.total = total
        self.done = already_done
        self.correct = 0
        self.scored = 0
        self.errors = 0
        """Tasks that ended in `error` or `timeout`."""
        self.infra = 0
        """Tasks that ended in `infra_error`: counted apart, as they point at the gateway, not the agent."""
        self.tool_calls = 0
        self._t0 = time.perf_counter()
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]rollout"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("EM {task.fields[em]}"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("infra {task.fields[infra]}"),
            TextColumn("{task.fields[calls_per_s]} calls/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            *([LLMTroubleColumn(llm)] if llm is not None else []),
            console=self.console,
            transient=False,
            disable=not enabled,
        )
        self._bar = self._progress.add_task("run", total=total, completed=already_done, **self._fields())

    def _fields(self) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        return {
            "em": f"{self.correct / self.scored:.3f}" if self.scored else "-",
            "errors": self.errors,
            "infra": self.infra,
            "calls_per_s": f"{self.tool_calls / elapsed:.1f}",
        }

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def add(self, result: TaskResult) -> None:
        """Count one finished task of this session; only `ok` tasks enter the running EM, as in the summary."""
        self.done += 1
        self.tool_calls += len(result.tool_calls)
        if result.status == "ok":
            self.scored += 1
            self.correct += int(exact_match(result.prediction, result.golden_answers))
        elif result.status == "infra_error":
            self.infra += 1
        else:
            self.errors += 1
        self._progress.update(self._bar, completed=self.done, **self._fields())

    def print(self, *renderables: Any) -> None:
        """Print above the bar (live events)."""
        self._progress.console.print(*renderables)
