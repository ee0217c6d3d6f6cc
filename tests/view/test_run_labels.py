"""The viewer names its runs as `report compare` does: two runs of one mode are told apart by their folders."""

from __future__ import annotations

from pathlib import Path

from rollout.view.pages import comparison, open_runs
from tests.view.made_runs import task, write_run


def test_runs_of_one_mode_get_the_names_their_comparison_gives_them(tmp_path: Path):
    first = write_run(tmp_path / "monday" / "hybrid", [task("q1", "capital?", "Rome", "Rome")], mode="hybrid")
    second = write_run(tmp_path / "tuesday" / "hybrid", [task("q1", "capital?", "Rome", "Paris")], mode="hybrid")
    dense = write_run(tmp_path / "tuesday" / "dense", [task("q1", "capital?", "Rome", "Rome")], mode="dense")
    runs = open_runs([first, second, dense])
    assert [r.label for r in runs] == ["hybrid (monday/hybrid)", "hybrid (tuesday/hybrid)", "dense"]
    assert [row.label for row in comparison(runs).rows] == [r.label for r in runs]
