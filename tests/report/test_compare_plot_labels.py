"""Long run names (a mode and the overrides of a sweep over several axes) are wrapped under the bars: the comparison
plots keep their panels, with no matplotlib `constrained_layout` warning and no overlapping names."""

from __future__ import annotations

import dataclasses
import warnings

from rollout.report.compare.comparison import Comparison, compare_runs
from rollout.report.compare.cost_plot import plot_costs
from rollout.report.compare.plot import TICK_LINES, TICK_WIDTH, plot_comparison, tick_label
from rollout.report.compare.run_folders import find_runs
from tests.report.test_compare import dense_tasks, make, sparse_tasks

OVERRIDES = ",agent=search_r1,llm.model=SmolLM2-135M-Instruct,llm.sampling.max_tokens=500,dataset.limit=45"


def long_named(c: Comparison) -> Comparison:
    names = {r.label: r.label + OVERRIDES for r in c.rows}
    return dataclasses.replace(
        c, rows=[dataclasses.replace(r, label=names[r.label]) for r in c.rows],
        pairs=[dataclasses.replace(p, label=names[p.label], baseline=names[p.baseline]) for p in c.pairs],
        baseline=names[c.baseline])


def test_a_long_name_is_wrapped_at_its_commas_and_cut_to_a_few_lines():
    label = tick_label("dense" + OVERRIDES)
    lines = label.splitlines()
    assert len(lines) == TICK_LINES and all(len(line) <= TICK_WIDTH for line in lines)
    assert lines[0] == "dense,agent=search_r1," and label.endswith("…")
    assert tick_label("hybrid,agent.top_k=1") == "hybrid,agent.top_k=1"  # a short one as it is


def test_long_run_names_draw_without_a_layout_warning(tmp_path):
    modes = [("dense", dense_tasks()), ("sparse", sparse_tasks()), ("hybrid", dense_tasks()), ("mixed", sparse_tasks())]
    runs = [make(tmp_path, f"r{i}", mode, tasks) for i, (mode, tasks) in enumerate(modes)]
    c = long_named(compare_runs(find_runs(runs)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_comparison(c, tmp_path / "comparison.png")
        plot_costs(c, tmp_path / "costs.png")
    assert [str(w.message) for w in caught] == []
    assert (tmp_path / "comparison.png").stat().st_size > 0 and (tmp_path / "costs.png").stat().st_size > 0
