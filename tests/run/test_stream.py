"""`run_with_events`: a program consumes a run's typed events and records as they happen."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rollout import RunOutcome, TaskEvent, TaskResult, compose_run_config, run_with_events
from rollout.errors import ConfigError
from rollout.jsonl import read_jsonl
from rollout.records import Question
from rollout.run.scheduler import PlannedTask, Scheduler
from tests.demo_runs import DemoRuns
from tests.harness.test_gateway_restart import UNUSED_ENV
from tests.harness.workers import LateDrainingWorker

SMALL_KB = ["dataset.n_passages=300", "dataset.n_questions=60", "mode=sparse", "progress=false"]


def test_events_come_before_their_task_s_record_and_the_outcome_comes_last(demo_runs: DemoRuns):
    # The shared hybrid demo run is made through run_with_events; what it yielded is kept in order.
    items = demo_runs.get("hybrid").streamed

    outcome = items[-1]
    assert isinstance(outcome, RunOutcome) and outcome.summary.n == 40
    assert not any(isinstance(i, RunOutcome) for i in items[:-1])
    results = [i for i in items if isinstance(i, TaskResult)]
    assert sorted(r.id for r in results) == sorted(t["id"] for t in read_jsonl(outcome.output_dir / "trajectory.jsonl"))
    for result in results:
        position = items.index(result)
        streamed = [i.event for i in items[:position] if isinstance(i, TaskEvent) and i.task_id == result.id]
        # Every event the record keeps was streamed, in order, before the record itself.
        assert streamed == result.events, result.id
        assert {"tool_call", "tool_result", "completion"} <= {e.type for e in streamed}


def test_events_a_worker_hands_over_late_still_come_before_their_task_s_record(ray_local):
    items: list[TaskEvent | TaskResult] = []
    cfg = replace(compose_run_config(), workers=1, concurrency_per_worker=2, watch=True)
    scheduler = Scheduler(cfg.worker_pool, UNUSED_ENV, on_result=items.append, actors=[LateDrainingWorker.remote()],
                          on_events=lambda events: items.extend(TaskEvent(*e) for e in events))
    scheduler.run([PlannedTask(Question(f"q{i}", f"question {i}", ["x"])) for i in range(4)])
    results = [i for i in items if isinstance(i, TaskResult)]
    assert sorted(r.id for r in results) == ["q0", "q1", "q2", "q3"]
    for result in results:
        streamed = [i.event for i in items[: items.index(result)] if isinstance(i, TaskEvent) and i.task_id == result.id]
        assert streamed == result.events and [e.type for e in streamed] == ["llm_output", "completion"], result.id


def test_a_bad_config_is_raised_to_the_consumer(tmp_path):
    cfg = compose_run_config(*SMALL_KB, f"output_dir={tmp_path / 'run'}", "gateway_config_path=/nonexistent.json")
    with pytest.raises(ConfigError):
        next(run_with_events(cfg))
