"""comparison.png: answer quality per mode, the paired metric differences with their CIs, and tool use.

Panels, left to right: EM / F1 / contains-answer per mode as grouped bars, then each extra metric whose values
lie in [0, 1]; each mode's difference from the baseline in every metric both have (EM, F1, contains, recall, then
the extra ones) with its paired bootstrap 95% CI (only when there is something to pair);
tool calls per task stacked by tool. Drawn with matplotlib's Agg backend, so it works without a
display (on a cluster node, inside a Hydra sweep). Run names (a mode and the overrides that tell the runs apart,
~150 characters in a sweep over several axes) are wrapped at their commas and cut to a few lines (`tick_label`), so
the panels keep their size; comparison.md has them whole.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on the machines sweeps run on

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from rollout.report.compare.comparison import Comparison  # noqa: E402
from rollout.report.compare.paired import CI_LEVEL  # noqa: E402
from rollout.report.scoring import ANSWER_METRICS, METRICS, metric_label  # noqa: E402

METRIC_COLORS = ("#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD", "#937860")
"""Bar colors of the metrics panel, in metric order (they repeat past the seventh)."""
DIFF_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
BETTER, WORSE, UNCLEAR = "#2E7D32", "#C62828", "#616161"
"""CI above zero, below zero, or across it."""


TICK_WIDTH = 24
"""Characters per line of a run's name under its bars."""
TICK_LINES = 3
"""Lines of a run's name at most; a longer one ends in "…"."""


def tick_label(label: str, width: int = TICK_WIDTH, lines: int = TICK_LINES) -> str:
    """`label` on lines of at most `width` characters, broken after its commas (a run's overrides) or, in a part
    longer than a line, anywhere; cut to `lines` lines ending in "…" when longer."""
    parts = label.split(",")
    chunks = [chunk for part in [*(p + "," for p in parts[:-1]), parts[-1]]
              for chunk in (part[i:i + width] for i in range(0, len(part), width))]
    out: list[str] = []
    for chunk in chunks:
        if out and len(out[-1]) + len(chunk) <= width:
            out[-1] += chunk
        else:
            out.append(chunk)
    if len(out) > lines:
        out = [*out[:lines - 1], out[lines - 1][:width - 1] + "…"]
    return "\n".join(out)


def _mode_ticks(c: Comparison) -> list[str]:
    return [tick_label(r.label) + ("\n(baseline)" if r.label == c.baseline and c.pairs else "") for r in c.rows]


def _set_mode_ticks(ax: Axes, c: Comparison) -> None:
    set_run_ticks(ax, _mode_ticks(c))


def set_run_ticks(ax: Axes, ticks: list[str]) -> None:
    """The runs' names (already `tick_label`-ed) under their bars, upright: `panel_width` gives each its room."""
    ax.set_xticks(range(len(ticks)), ticks, fontsize=8)


def panel_width(labels: list[str]) -> float:
    """Inches of a panel with a bar group per run, wide enough for the longest line of their `tick_label`s."""
    longest = max((len(line) for label in labels for line in tick_label(label).splitlines()), default=0)
    return max(4.5, len(labels) * max(0.9, 0.07 * longest + 0.2) + 1.5)


def _bar_metrics(c: Comparison) -> list[str]:
    """EM, F1, contains, then the extra metrics whose every value lies in [0, 1] (they share the axis)."""
    extra = [m for m in c.metrics if m not in METRICS
             and all(0.0 <= (r.extra.get(m) or 0.0) <= 1.0 for r in c.rows)]
    return [*ANSWER_METRICS, *extra]


def _metrics_panel(ax: Axes, c: Comparison) -> None:
    labels = [r.label for r in c.rows]
    metrics = _bar_metrics(c)
    width = 0.8 / len(metrics)
    for j, key in enumerate(metrics):
        xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(labels))]
        values = [r.metric(key) or 0.0 for r in c.rows]
        bars = ax.bar(xs, values, width, label=metric_label(key), color=METRIC_COLORS[j % len(METRIC_COLORS)])
        # Side by side, more than three values a mode no longer fit across their bars: upright, they do.
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=2,
                     rotation=90 if len(metrics) > 3 else 0)
    _set_mode_ticks(ax, c)
    ax.set_ylim(0, 1.3 if len(metrics) > 3 else 1.12)  # room for upright labels under the legend
    ax.set_ylabel("score (mean over scored tasks)")
    ax.set_title("answer quality per mode")
    ax.legend(loc="upper left", ncols=min(len(metrics), 4), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def _diff_panel(ax: Axes, c: Comparison) -> None:
    pairs = [p for p in c.pairs if any(d.diff is not None for d in p.metrics.values())]
    ys = list(range(len(pairs)))[::-1]  # first pair on top, as in the tables
    rows = max(len(p.metrics) for p in pairs) if pairs else 1
    step = 0.8 / rows
    bound = 0.05
    for y, p in zip(ys, pairs, strict=True):
        for j, (key, d) in enumerate(p.metrics.items()):
            if d.diff is None:
                continue
            name = metric_label(key)
            at = y + ((rows - 1) / 2 - j) * step  # EM on top within its mode
            color = BETTER if d.ci_low > 0 else WORSE if d.ci_high < 0 else UNCLEAR
            ax.errorbar(d.diff, at, xerr=[[d.diff - d.ci_low], [d.ci_high - d.diff]],
                        fmt=DIFF_MARKERS[j % len(DIFF_MARKERS)], color=color, capsize=3, markersize=5)
            ax.annotate(f"{name} {d.diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]", (d.ci_high, at),
                        xytext=(4, 0), textcoords="offset points", va="center", fontsize=6, color=color)
            bound = max(bound, abs(d.ci_low), abs(d.ci_high))
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(ys, [f"{tick_label(p.label)}\nn={p.shared} · {p.wrong_to_right} W→R · {p.right_to_wrong} R→W"
                       for p in pairs],
                  fontsize=8)
    ax.set_ylim(-0.6, len(pairs) - 0.4)
    ax.set_xlim(-bound * 1.3, bound * 2.2)  # room on the right for the labels
    ax.set_xlabel(f"metric − metric of {tick_label(c.baseline, 40, 1)} (paired by question, "
                  f"{100 * CI_LEVEL:.0f}% bootstrap CI)")
    ax.set_title(f"differences vs {tick_label(c.baseline, 40, 1)}")
    ax.grid(axis="x", alpha=0.3)


def _tools_panel(ax: Axes, c: Comparison) -> None:
    labels = [r.label for r in c.rows]
    bottoms = [0.0] * len(labels)
    colors = plt.get_cmap("tab10")
    for k, tool in enumerate(c.tools):
        values = [r.calls_per_task.get(tool, 0.0) for r in c.rows]
        ax.bar(range(len(labels)), values, 0.6, bottom=bottoms, label=tool, color=colors(k % 10))
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for i, total in enumerate(bottoms):
        ax.annotate(f"{total:.2f}", (i, total), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
    _set_mode_ticks(ax, c)
    ax.set_ylim(0, max(bottoms + [0.5]) * 1.25)
    ax.set_ylabel("tool calls per task")
    ax.set_title("tool use per mode")
    if c.tools:
        ax.legend(loc="upper left", fontsize=7, frameon=False)
    else:
        ax.text(0.5, 0.5, "no tool calls", transform=ax.transAxes, ha="center", va="center", color=UNCLEAR)
    ax.grid(axis="y", alpha=0.3)


def plot_comparison(c: Comparison, path: Path | str) -> Path:
    """Draw the comparison into `path` (PNG); returns the path."""
    path = Path(path)
    with_diff = any(d.diff is not None for p in c.pairs for d in p.metrics.values())
    panels = [_metrics_panel, *([_diff_panel] if with_diff else []), _tools_panel]
    width = panel_width([r.label for r in c.rows])
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 4.8), layout="constrained")
    try:
        for draw, ax in zip(panels, axes, strict=True):
            draw(ax, c)
        fig.suptitle(f"{len(c.rows)} runs · baseline {tick_label(c.baseline, 80, 1)}")
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
