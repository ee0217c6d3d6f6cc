"""The run's third stage: its tasks on the workers, each record appended to trajectory.jsonl as it finishes.

A folder that holds tasks of the same run identity resumes (`rollout.run.resume`); the specs the fingerprint hashes
go to tools.json and the run's config to config.yaml before the first task, so the folder always says what it is.
Ctrl-C stops the workers and keeps what finished.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import OmegaConf

from rollout.events import AnyEvent
from rollout.llm.trouble import watch_llm_trouble
from rollout.logs import QUIET
from rollout.records import TaskKey, TaskResult
from rollout.run.config import RunConfig
from rollout.run.identity import RunIdentity
from rollout.run.prepare import Prepared
from rollout.run.resume import finished_tasks, plan_resume, tasks_to_run
from rollout.run.scheduler import Scheduler
from rollout.run.serving import Served
from rollout.run.timeline import Timeline
from rollout.run_folder import CONFIG_FILE, TRAJECTORY_FILE, RunTools, append_task, write_tools
from rollout.view.progress import RunProgress
from rollout.view.render import format_live_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RolledOut:
    """How the roll-out ended."""

    total: int
    """Tasks of the run (questions x repeats), finished before it or not."""
    interrupted: bool
    """Ctrl-C stopped it; what finished is in the trajectory."""
    ran: Counter[str]
    """Tasks this run finished, by status."""
    not_asked: frozenset[TaskKey]
    """Tasks in the folder this run no longer asks (an earlier run's, over more questions or repeats)."""


def roll_out(cfg: RunConfig, prepared: Prepared, served: Served, timeline: Timeline, *,
             on_event: Callable[[str, AnyEvent], None] | None,
             on_task: Callable[[TaskResult], None] | None) -> RolledOut:
    """Run the tasks not finished yet; `on_event` and `on_task` as `rollout.run.driver.run` takes them."""
    out, data = cfg.output_dir, prepared.data
    finished = finished_tasks(out, RunIdentity.of(cfg, served.tool_specs, data))
    # The specs whose hashes the fingerprint holds, for whoever trains on this folder's conversations
    # (rollout.export): a resumed run that got here offers the very same ones.
    write_tools(out, RunTools(served.tool_specs, prepared.gateway_file.dynamic_toolsets))
    timeline.mark("tools listed")
    (out / CONFIG_FILE).write_text(OmegaConf.to_yaml(OmegaConf.create(cfg.to_dict())), encoding="utf-8")
    resumed = plan_resume(finished, data.questions, cfg.repeats)
    total = len(data.questions) * cfg.repeats
    already = resumed.already
    if already:
        logger.info("Resuming: %d of %d tasks already finished in %s", already, total, out)
    ran: Counter[str] = Counter()
    interrupted = False
    # Slow LLM requests, timeouts and retries: the first few shown, all counted on the progress line.
    with (out / TRAJECTORY_FILE).open("a", encoding="utf-8") as trajectory, watch_llm_trouble() as llm_trouble, \
            RunProgress(total, already, enabled=cfg.progress and cfg.verbose > QUIET, llm=llm_trouble) as progress:

        def on_result(result: TaskResult) -> None:
            append_task(trajectory, result)
            ran[result.status] += 1
            progress.add(result)
            timeline.mark_once("first result")
            if on_task is not None:
                on_task(result)

        def on_events(events: list[tuple[str, AnyEvent]]) -> None:
            for task_id, event in events:
                if on_event is not None:
                    on_event(task_id, event)
                else:
                    progress.print(format_live_event(task_id, event))

        scheduler = Scheduler(cfg.worker_pool, served.env_spec, on_result=on_result, gateway=served.gateway.watched(),
                              on_events=on_events if cfg.watch else None, actors=served.actors)
        try:
            scheduler.run(tasks_to_run(data.questions, cfg.repeats, cfg.seed, finished), total - already)
        except KeyboardInterrupt:
            interrupted = True
            logger.warning("Interrupted: stopping the workers; finished tasks are saved")
    timeline.mark("all results")
    return RolledOut(total, interrupted, ran, resumed.not_asked)
