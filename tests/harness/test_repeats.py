"""repeats=N: each question runs N times with its own recorded seed; resume and the summary know repeats.

The same runs check resuming: a rerun skips finished tasks and leaves their lines as they were, a run folder
refuses a rerun with another gateway file, and resume=false starts over (one scenario, three runs).
"""

from __future__ import annotations

import json

import pytest

from rollout.errors import ConfigError
from rollout.paths import PROJECT_ROOT
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from tests.test_records import assert_trajectory_shape

SMALL_KB = ["dataset.n_passages=300", "dataset.n_questions=60", "mode=sparse", "progress=false"]


def test_repeats_run_each_question_n_times_with_distinct_seeds_and_resume_by_repeat(ray_local, cache_dir, tmp_path):
    out = tmp_path / "run"
    gateway = tmp_path / "gw.json"
    gateway.write_text((PROJECT_ROOT / "conf/gateways/rag_sparse_only.json").read_text())
    common = (*SMALL_KB, "agent=simulated", "agent.llm_latency_s=0.01", f"output_dir={out}", f"cache_dir={cache_dir}",
              f"gateway_config_path={gateway}", "repeats=3", "seed=10", "workers=1")  # an actor less per run
    first = run(compose_run_config(*common, "dataset.limit=4"))
    first_lines = (out / "trajectory.jsonl").read_text()
    tasks = [json.loads(line) for line in first_lines.splitlines()]
    assert sorted((t["id"], t["repeat"]) for t in tasks) == sorted({(t["id"], r) for t in tasks for r in range(3)})
    assert len(tasks) == 12 and {t["seed"] for t in tasks} == {10, 11, 12}
    assert all(t["seed"] == 10 + t["repeat"] for t in tasks)
    for t in tasks:  # the worker's TaskResult reached the file in the same shape as ever
        assert_trajectory_shape(t)
    assert {e["type"] for t in tasks for e in t["events"]} >= {"llm_output", "tool_call", "tool_result", "completion"}
    assert all(t["tool_calls"] for t in tasks)
    s = first.summary.to_json()
    assert s == json.loads((out / "evaluation_summary.json").read_text())
    assert s["n"] == 12 and s["repeats"] == 3 and s["deterministic_agent"] is True
    # The simulated agent is deterministic: its repeats agree, so the interval over repeats has no width
    # and pass@k does not grow with k.
    em = s["metrics"]["exact_match"]
    assert s["ci95"]["exact_match"] == [em, em]
    assert s["pass_at_k"] == {"1": em, "2": em, "3": em}

    again = run(compose_run_config(*common, "dataset.limit=6"))  # extends by whole questions, all repeats
    assert (out / "trajectory.jsonl").read_text().startswith(first_lines)  # finished tasks skipped, lines untouched
    tasks = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert len(tasks) == 18 and again.summary.n == 18
    assert len({(t["id"], t["repeat"]) for t in tasks}) == 18

    gateway.write_text((PROJECT_ROOT / "conf/gateways/rag_hybrid.json").read_text().replace(
        '"rag_query", ', ""))  # same tools, another file: still refused, the file is part of the identity
    with pytest.raises(ConfigError, match=r"gateway_file_sha256: \w+ → \w+.*resume=false"):
        run(compose_run_config(*common, "dataset.limit=6"))
    fresh = run(compose_run_config(*common, "dataset.limit=3", "resume=false"))
    assert fresh.summary.n == 9 and len((out / "trajectory.jsonl").read_text().splitlines()) == 9
