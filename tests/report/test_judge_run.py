"""A run with `judge.model` set judges its answers once its trajectory is complete; its agent usage stays its own."""

from __future__ import annotations

import json

from rollout.report.judge.store import scores_path
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run_folder import iter_trajectory
from tests.demo_runs import SMALL_KB
from tests.report.judge_server import judge_server


def test_a_run_with_a_judge_judges_every_scored_answer_at_its_end(ray_local, cache_dir, tmp_path, capsys):
    with judge_server() as judge:
        outcome = run(compose_run_config(
            *SMALL_KB, "dataset.limit=4", "workers=1", f"cache_dir={cache_dir}", f"output_dir={tmp_path / 'run'}",
            "judge.model=judge-m", f"judge.base_url={judge.base_url}", "progress=false"))
        asked = judge.count
    tasks = list(iter_trajectory(outcome.output_dir))
    scores = [json.loads(line) for line in scores_path(outcome.output_dir).read_text().splitlines()]
    assert asked == len(tasks) == len(scores) == 4
    assert {(s["id"], s["repeat"]) for s in scores} == {t.key for t in tasks}
    assert all(s["metrics"]["judge_correct"] in (0.0, 1.0) for s in scores)
    assert "judge usage (apart from the agent's)" in capsys.readouterr().out
