"""comparison_costs.png: where a task's time and tokens go, one stacked bar per run.

Left panel, seconds per task: the agent's own LLM requests, each tool's calls, and waiting (the rest of the
wall-clock time). Parallel tool calls overlap, so a bar can stand above the wall-clock time written on it.
Right panel, tokens per task by stage: what the tool results of each stage put into the agent's context plus
the tokens of LLM calls those tools made, and `agent`, the agent's own turns (whose prompts re-read that
context, so the agent's segment already holds it once more). Every number is the run's accounting
(`rollout.report.costs`: means over every record, scored or not), as in the summary and the compare
table. Parts that are 0 in every run are left out.

Written beside comparison.png when some run's records carry accounting; drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on the machines sweeps run on

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from rollout.accounting import AGENT, STAGES
from rollout.report.compare.comparison import Comparison
from rollout.report.compare.plot import panel_width, set_run_ticks, tick_label
from rollout.report.compare.run_row import RunRow

LLM, WAITING = "LLM", "waiting"
"""Names of the time panel's first and last parts; the tools' names come between."""
FIXED_COLORS = {LLM: "#4C72B0", WAITING: "#BDBDBD", AGENT: "#4C72B0"}
NO_ACCOUNTING = "no accounting"


@dataclass(frozen=True, slots=True)
class Stack:
    """One panel's stacked bars: a bar per run, a segment per part."""

    runs: list[str]
    """Bar labels, in the comparison's row order."""
    parts: dict[str, list[float]]
    """Part name → its height in each run's bar, bottom segment first (0 for a run without accounting)."""
    notes: list[str]
    """Text written above each bar (the wall-clock or token total, or that the run has no accounting)."""

    @property
    def heights(self) -> list[float]:
        """Each bar's height: its parts added up."""
        return [sum(values[i] for values in self.parts.values()) for i in range(len(self.runs))]


def _stack(rows: list[RunRow], parts: dict[str, list[float]], notes: list[str]) -> Stack:
    kept = {name: values for name, values in parts.items() if any(values)}
    return Stack([r.label for r in rows], kept, notes)


def time_stack(c: Comparison) -> Stack:
    """Seconds per task: LLM, each tool (sorted by name), waiting."""
    accounted = [r.accounting for r in c.rows]
    tools = sorted({t for a in accounted if a is not None for t in a.tool_time_s})
    parts = {LLM: [a.time_s.llm if a else 0.0 for a in accounted]}
    parts |= {t: [a.tool_time_s.get(t, 0.0) if a else 0.0 for a in accounted] for t in tools}
    parts[WAITING] = [a.time_s.waiting if a else 0.0 for a in accounted]
    notes = [f"wall {a.time_s.total:.3g} s" if a else NO_ACCOUNTING for a in accounted]
    return _stack(c.rows, parts, notes)


def token_stack(c: Comparison) -> Stack:
    """Tokens per task: each stage (`rollout.accounting.STAGES`, then any other met), then the agent's."""
    accounted = [r.accounting for r in c.rows]
    extra = sorted({s for a in accounted if a is not None for s in a.tokens} - {*STAGES, AGENT})
    parts = {s: [a.tokens.get(s, 0.0) if a else 0.0 for a in accounted] for s in (*STAGES, *extra, AGENT)}
    notes = [f"{sum(a.tokens.values()):,.0f}" if a else NO_ACCOUNTING for a in accounted]
    return _stack(c.rows, parts, notes)


def draw_stack(ax: Axes, stack: Stack, *, ylabel: str, title: str, xlabel: str | None = None) -> None:
    """Draw `stack` into `ax`: one `BarContainer` per part, in `stack.parts` order, bottom first."""
    palette = plt.get_cmap("tab10")
    bottoms = [0.0] * len(stack.runs)
    others = 0
    for name, values in stack.parts.items():
        if name in FIXED_COLORS:
            color = FIXED_COLORS[name]
        else:
            color = palette((others + 1) % 10)  # tab10's first colour is LLM's and the agent's
            others += 1
        ax.bar(range(len(stack.runs)), values, 0.6, bottom=bottoms, label=name, color=color)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for i, (top, note) in enumerate(zip(bottoms, stack.notes, strict=True)):
        ax.annotate(note, (i, top), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
    set_run_ticks(ax, [tick_label(run) for run in stack.runs])
    # Head room above the tallest bar for its note and the legend's lines.
    ax.set_ylim(0, max([*bottoms, 1e-9]) * (1.15 + 0.07 * len(stack.parts)))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)
    if stack.parts:
        ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def plot_costs(c: Comparison, path: Path | str) -> Path:
    """Draw both panels into `path` (PNG); returns the path."""
    path = Path(path)
    width = panel_width([r.label for r in c.rows])
    fig, (time_ax, token_ax) = plt.subplots(1, 2, figsize=(2 * width, 4.8), layout="constrained")
    try:
        draw_stack(time_ax, time_stack(c), ylabel="seconds per task (mean over every task)",
                   title="where a task's time goes",
                   xlabel="parallel tool calls overlap: a bar can stand above its wall-clock time")
        draw_stack(token_ax, token_stack(c), ylabel="tokens per task (mean over every task)",
                   title="where a task's tokens go", xlabel="by stage; the agent's prompts re-read the context")
        fig.suptitle(f"{len(c.rows)} runs · time and tokens per task")
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
