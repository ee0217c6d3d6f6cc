"""The run: prepare → serve → roll out → score → report, each stage handing its typed product to the next.

- `rollout.run.prepare`: the input checked, the agent built, the data prepared (`Prepared`), before any process;
- `rollout.run.serving`: the gateway, Ray and the workers up, the tools listed (`Served`);
- `rollout.run.roll_out`: the tasks run, each record appended as it finishes (`RolledOut`);
- `rollout.run.finish`: judged, scored and printed (`RunSummary`), then the gateway's tool report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from rollout.errors import RolloutError, RunInterrupted
from rollout.events import AnyEvent
from rollout.records import TaskResult
from rollout.run.config import RunConfig
from rollout.run.finish import score_and_print
from rollout.run.lock import hold_run_lock
from rollout.run.outcome import RunOutcome
from rollout.run.prepare import prepare
from rollout.run.refused import holds_nothing, remove_refused_folder
from rollout.run.roll_out import roll_out
from rollout.run.serving import serving
from rollout.run.timeline import Timeline
from rollout.run_folder import TRAJECTORY_FILE

logger = logging.getLogger(__name__)


def run(cfg: RunConfig, *, on_event: Callable[[str, AnyEvent], None] | None = None,
        on_result: Callable[[TaskResult], None] | None = None) -> RunOutcome:
    """Run one experiment end to end; bad input raises `RolloutError` before anything starts.

    A run whose tasks all fail still writes its folder and returns: its `RunOutcome.failure` says so (the
    command line exits 1 on it, see `rollout.run.outcome`); this never exits the process.

    Finished tasks are appended to trajectory.jsonl one by one; a rerun into the same output_dir
    resumes (see `rollout.run.resume`). Ctrl-C stops the run, keeps what finished and raises
    `RunInterrupted`. A second driver into the same output_dir is refused (`rollout.run.lock`).

    `on_event(task_id, event)` is called with each task's events as they happen (instead of the
    live lines `watch=true` prints), `on_result` with each finished task's record, both on this
    thread; `rollout.run.stream.run_with_events` turns them into a generator.
    """
    if on_event is not None:
        cfg = replace(cfg, watch=True)  # the workers keep their events for the driver to collect
    new_folder = holds_nothing(cfg.output_dir)
    with hold_run_lock(cfg.output_dir):
        try:
            timeline = Timeline()
            prepared = prepare(cfg)
            timeline.mark("data")
            with serving(cfg, prepared, timeline) as served:
                rolled = roll_out(cfg, prepared, served, timeline, on_event=on_event, on_task=on_result)
                summary = score_and_print(cfg.output_dir, cfg.scoring_config(), cfg.judge_settings(), prepared.agent,
                                          timeline, rolled.interrupted, rolled.not_asked, served.tool_specs,
                                          served.degraded_tools)
                write_tool_report = served.gateway.report_when_stopped(cfg.output_dir)
            write_tool_report()
            timeline.mark("stopped")
            logger.debug("Timeline after the summary: %s", timeline.line())
            if rolled.interrupted:
                raise RunInterrupted(f"interrupted with {summary.n} of {rolled.total} tasks finished, saved in "
                                     f"{cfg.output_dir}. Run the same command again to resume")
            return RunOutcome(cfg.output_dir, summary, dict(rolled.ran))
        except RunInterrupted:
            raise
        except RolloutError:
            # Refused: the folder it made (lock, log) goes, still under the lock; an earlier run's folder stays.
            if new_folder and not (cfg.output_dir / TRAJECTORY_FILE).exists():
                remove_refused_folder(cfg.output_dir)
            raise
