"""by_step.png / by_time.png: each tool's share of the calls per window (stacked), over the calls per window.

One bar per window, as wide as the window and placed at its start, so a gap in the training (steps or minutes with
no call) shows as a gap. Drawn with matplotlib's Agg backend, as `rollout.report.compare.plot` is.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on the machines training runs on

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rollout.report.tool_calls.use import KEY_COLUMNS, ToolUse  # noqa: E402
from rollout.report.tool_calls.windows import duration  # noqa: E402

TIME_UNITS = ((3600.0, "hours"), (60.0, "minutes"), (1.0, "seconds"))
"""The x axis of a time plot: the largest unit no longer than the window."""


def plot_tool_use(use: ToolUse, path: Path | str) -> Path:
    """Draw `use` into `path` (PNG); returns the path."""
    path = Path(path)
    s = use.summary
    start_column = KEY_COLUMNS[s["by"]][0]
    window = float(s["window"])
    # Time in the unit of the window (a run of hours in 5 m windows reads in minutes); steps as they are.
    unit, unit_name = next((u for u in TIME_UNITS if window >= u[0]), TIME_UNITS[-1]) if s["by"] == "time" else (1, "")
    width = window / unit
    # Each bar centred on its window: steps k..k+n-1 on (k + k+n-1) / 2, each step at the middle of its own slot.
    middle = (width - 1) / 2 if s["by"] == "step" else width / 2
    colors = plt.get_cmap("tab10")
    fig, (share_ax, calls_ax) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, layout="constrained",
                                             height_ratios=(3, 2))
    try:
        share_bottom = None
        calls_bottom = None
        for k, tool in enumerate(use.tool_names):
            rows = use.tools[use.tools["tool_name"] == tool]
            xs = rows[start_column].astype(float).to_numpy() / unit + middle
            share = rows["share"].astype(float).to_numpy()
            calls = rows["calls"].astype(float).to_numpy()
            style = {"width": width * 0.95, "align": "center", "color": colors(k % 10), "linewidth": 0}
            share_ax.bar(xs, share, bottom=share_bottom, label=tool, **style)
            calls_ax.bar(xs, calls, bottom=calls_bottom, **style)
            share_bottom = share if share_bottom is None else share_bottom + share
            calls_bottom = calls if calls_bottom is None else calls_bottom + calls
        share_ax.set_ylim(0, 1)
        share_ax.set_ylabel("share of the window's calls")
        share_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        share_ax.grid(axis="y", alpha=0.3)
        calls_ax.set_ylabel("calls per window")
        calls_ax.grid(axis="y", alpha=0.3)
        if s["by"] == "step":
            calls_ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 1.5
            calls_ax.set_xlabel("trainer step" if width == 1 else f"trainer step (windows of {width:g} steps)")
        else:
            calls_ax.set_xlabel(f"{unit_name} since the first call (windows of {duration(window)})")
        counted = f"{s['placed_calls']} calls" + (f", {s['traffic']} traffic" if s["traffic"] != "all" else "")
        fig.suptitle(f"tool use by {s['by']} · {counted} · {Path(s['run_dir']).name}", fontsize=10)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
