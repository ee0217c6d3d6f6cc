"""The task table of `python -m rollout.view RUN`: one row per task (status, right or wrong, calls, tokens,
time), sorted and totalled. Styled `Text` only, as in `rollout.view.render`: model output prints as written."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rollout.report.metrics import exact_match
from rollout.view.render import STATUS_STYLE, clip, number_text

_ID_PARTS = re.compile(r"\d+|\D+")


@dataclass(slots=True)
class TaskRow:
    """What the table and `--follow` keep of one trajectory line (the rest is dropped as read)."""

    id: str
    status: str
    em: float
    turns: int
    tool_calls: int
    tokens: float | None
    latency_s: float
    answer: str
    """The prediction, or the error of a failed task, already cut for the table."""
    gold: str
    """The gold answers, joined by " | " and cut for the table."""
    repeat: int
    finished_t: float | None
    """Unix time of the task's last event (None for records without events)."""

    @property
    def order(self) -> tuple[tuple[tuple[int, int | str], ...], int]:
        """Where the table lists the task: question order, which is id order with the numbers within ids read as
        numbers (q-9 before q-10), then repeat order."""
        parts = _ID_PARTS.findall(self.id)
        return tuple((0, int(part)) if part.isdigit() else (1, part) for part in parts), self.repeat

    @classmethod
    def from_json(cls, data: dict[str, Any], answer_chars: int = 60) -> TaskRow:
        """Read tolerantly: records of older runs lack status, usage and events."""
        error = data.get("error")
        status = data.get("status") or ("error" if error else "ok")
        usage = data.get("usage") or {}
        tokens = usage.get("total_tokens")
        if tokens is None and ("prompt_tokens" in usage or "completion_tokens" in usage):
            tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        prediction = str(data.get("prediction") or "")
        events = data.get("events") or []
        return cls(
            id=str(data["id"]),
            status=str(status),
            em=exact_match(prediction, data.get("golden_answers") or []),
            turns=int(data.get("turns") or 0),
            tool_calls=len(data.get("tool_calls") or []),
            tokens=tokens,
            latency_s=float(data.get("latency_s") or 0.0),
            answer=clip(" ".join((prediction or str(error or "")).split()), answer_chars),
            gold=clip(" ".join(" | ".join(map(str, data.get("golden_answers") or [])).split()), answer_chars // 2),
            repeat=int(data.get("repeat") or 0),
            finished_t=events[-1].get("t") if events else None,
        )


@dataclass(slots=True)
class Totals:
    """Running totals over every task read, for the footer line."""

    n: int = 0
    status: Counter[str] = field(default_factory=Counter)
    em: float = 0.0
    tool_calls: int = 0
    tokens: float = 0.0
    latency_s: float = 0.0

    def add(self, row: TaskRow) -> None:
        self.n += 1
        self.status[row.status] += 1
        self.em += row.em
        self.tool_calls += row.tool_calls
        self.tokens += row.tokens or 0
        self.latency_s += row.latency_s

    def line(self) -> Text:
        if not self.n:
            return Text("0 tasks", style="dim")
        out = Text(f"{self.n:,} tasks · ")
        for status in ("ok", "error", "timeout", "infra_error"):
            if status == "infra_error" and not self.status[status]:
                continue  # named only when some task had it: most runs have none
            out.append(f"{status} {self.status[status]:,}", style=STATUS_STYLE[status] if self.status[status] else "dim")
            out.append(" · ")
        out.append(f"EM {self.em / self.n:.3f}", style="bold")
        out.append(f" · {self.tool_calls:,} tool calls ({self.tool_calls / self.n:.1f}/task)")
        out.append(f" · {number_text(self.tokens)} tokens · mean latency {self.latency_s / self.n:.2f} s")
        return out


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, "yellow"))


def render_table(console: Console, rows: list[TaskRow], totals: Totals, matched: int, filters: str) -> None:
    """The tasks table, the totals over the whole file, and what the filters left out."""
    table = Table(title_justify="left", expand=False)
    for name, justify in (("id", "left"), ("status", "left"), ("EM", "right"), ("turns", "right"),
                          ("tools", "right"), ("tokens", "right"), ("latency s", "right"),
                          ("prediction / error", "left"), ("gold", "left")):
        table.add_column(name, justify=justify, overflow="fold" if name == "id" else "ellipsis",
                         no_wrap=name != "id")
    for r in rows:
        answer = Text(r.answer, style="red" if r.status != "ok" else ("green" if r.em else ""))
        table.add_row(r.id, _status(r.status), f"{r.em:.0f}", str(r.turns), str(r.tool_calls),
                      number_text(r.tokens), f"{r.latency_s:.2f}", answer, r.gold)
    if not rows:
        table.add_row(Text("(no tasks match)", style="dim"), *[""] * 8)
    console.print(table)
    console.print(totals.line())
    if len(rows) < totals.n:
        console.print(Text(f"showing {len(rows):,} of {matched:,} matching tasks{filters}", style="dim"))


def format_task_line(row: TaskRow) -> Text:
    """One finished task as `--follow` prints it."""
    t = row.finished_t if row.finished_t is not None else time.time()
    out = Text(time.strftime("%H:%M:%S", time.localtime(t)), style="dim")
    out.append(f" {row.id:<14} ")
    out.append(f"{row.status:<7}", style=STATUS_STYLE.get(row.status, "yellow"))
    out.append(f" EM {row.em:.0f}", style="green" if row.em else "yellow")
    out.append(f" · {row.turns} turns · {row.tool_calls} calls · {number_text(row.tokens)} tok"
               f" · {row.latency_s:.2f} s  ")
    out.append(row.answer, style="red" if row.status != "ok" else "")
    return out
