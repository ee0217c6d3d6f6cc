"""The run: data → gateway → Ray workers → trajectory → scores and tool stats."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Container
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from envs.http_mcp_rag_env import keep_rag_modules
from rollout.console import ReadableConsole
from rollout.data.dataset import prepare_data
from rollout.errors import ConfigError, RolloutError, RunInterrupted
from rollout.events import AnyEvent
from rollout.gateway.tools import SERVED_RESOURCE_TYPES
from rollout.gateway_file import load_gateway_file
from rollout.llm.trouble import watch_llm_trouble
from rollout.logs import QUIET
from rollout.records import TaskKey, TaskResult
from rollout.report.printed import print_summary
from rollout.report.rescore import RunFacts, ScoringConfig, score_folder
from rollout.report.user_scorers import load_scorers
from rollout.run.config import RunConfig
from rollout.run.gateway_kinds import gateway_for_run
from rollout.run.gateway_process import GatewayProcess
from rollout.run.identity import RunIdentity
from rollout.run.lock import hold_run_lock
from rollout.run.outcome import RunOutcome
from rollout.run.ray_session import ray_session
from rollout.run.refused import holds_nothing, remove_refused_folder
from rollout.run.resume import finished_tasks, plan_resume, start_fresh, tasks_to_run
from rollout.run.scheduler import Scheduler, start_actors
from rollout.run.sweep_gateway import kept_for_the_sweep
from rollout.run.worker import EnvSpec
from rollout.run_folder import (
    CONFIG_FILE,
    STATS_DIR,
    TRAJECTORY_FILE,
    RunTools,
    append_task,
    write_tools,
)
from rollout.summary import RunSummary
from rollout.view.progress import RunProgress
from rollout.view.render import format_live_event
from rollout.wire import resolve_token

logger = logging.getLogger(__name__)


def env_spec_for(cfg: RunConfig, url: str, run_id: str) -> EnvSpec:
    """How each worker's environment reaches the gateway."""
    return EnvSpec(
        url=url,
        gateway_config_path=str(cfg.gateway_config_path),
        system_prompt=cfg.system_prompt,
        call_timeout_s=cfg.gateway.call_timeout_s,
        auth_token=resolve_token(cfg.gateway.auth_token),
        reconnect_timeout_s=cfg.gateway.reconnect_timeout_s,
        run_id=run_id,
    )


def offered_tools(env_spec: EnvSpec) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The tool schemas a worker's environment will offer (for the run's fingerprint), and which of those tools
    the gateway serves degraded, name → reason (for the summary)."""

    async def probe() -> tuple[list[dict[str, Any]], dict[str, str]]:
        async with env_spec.build("driver") as env:
            return list(env.tool_specs), env.degraded_tools

    return asyncio.run(probe())


def check_agent(cfg: RunConfig) -> Any:
    """Build the agent once here, so a bad agent config or a dead LLM endpoint fails before the run starts."""
    try:
        agent = instantiate(cfg.agent)
    except InstantiationException as e:
        if isinstance(e.__cause__, RolloutError):
            raise e.__cause__ from None
        raise ConfigError(f"could not build agent {cfg.agent.get('_target_')}: {e.__cause__ or e}") from e
    check = getattr(agent, "check", None)
    if check is not None:
        asyncio.run(check())
    return agent


def check_agent_tools(agent: Any, tool_specs: list[dict[str, Any]]) -> None:
    """Let an agent whose config names tools (agent=tagged's search tags) refuse the offered ones before any task
    starts, with a `ConfigError` naming them, instead of failing every task."""
    check = getattr(agent, "check_tools", None)
    if check is not None:
        check(tool_specs)


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
            return _run_holding_lock(cfg, on_event, on_result)
        except RunInterrupted:
            raise
        except RolloutError:
            # Refused: the folder it made (lock, log) goes, still under the lock; an earlier run's folder stays.
            if new_folder and not (cfg.output_dir / TRAJECTORY_FILE).exists():
                remove_refused_folder(cfg.output_dir)
            raise


class Timeline:
    """Where a run's wall time goes: seconds since the start at each step, logged as one line at the end."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.started_at = time.time()
        """The start as Unix time, the clock the gateway's ledger lines are stamped with."""
        self.marks: dict[str, float] = {}

    def mark(self, step: str) -> None:
        self.marks[step] = time.perf_counter() - self.started

    def mark_once(self, step: str) -> None:
        self.marks.setdefault(step, time.perf_counter() - self.started)

    def line(self) -> str:
        return " · ".join(f"{step} {at:.1f}" for step, at in self.marks.items())


def _tool_report_once_stopped(out: Path, gateway: GatewayProcess) -> Future[None]:
    """Stop the run's own gateway and write the tool report from its ledger, on a thread of their own, so that both
    overlap Ray's shutdown (about a second each). Once the gateway has stopped, a call still running when its task
    timed out is in the ledger too. A sweep's gateway serves on for its next jobs: the report is written at once;
    the ledger holds every call of the finished tasks (the gateway writes a call's line before it answers), and only
    a call still running after its task timed out may land later, counted by a later `rollout report tool-stats`."""

    def stop_and_report() -> None:
        if not kept_for_the_sweep(gateway):
            gateway.stop()
        write_tool_report(out)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool-report")
    done = pool.submit(stop_and_report)
    pool.shutdown(wait=False)  # the caller waits for `done`
    return done


def write_tool_report(out: Path) -> None:
    """`rollout.report.write_tool_report`, imported when used: the report needs pandas, which the summary does not."""
    from rollout.report.tool_stats import write_tool_report as write

    write(out)


def _score_and_print(cfg: RunConfig, out: Path, agent: object, timeline: Timeline, interrupted: bool,
                     not_asked: Container[TaskKey], tool_specs: list[dict[str, Any]],
                     degraded_tools: dict[str, str]) -> RunSummary:
    """Judge (when configured), score and print the run's summary; returns it."""
    if not interrupted and (judge := cfg.judge_settings()) is not None:
        from rollout.report.judge_command import judge_finished_run  # the judge's client, for judged runs only

        judge_finished_run(out, judge, ReadableConsole())  # its scores file joins the summary below
    # The trajectory holds this run's tasks and those of earlier runs into the folder: only the latter may be
    # tasks this run no longer asks.
    summary = score_folder(
        out, ScoringConfig(mode=cfg.mode_name, gateway_file=str(cfg.gateway_config_path),
                           score_failed=cfg.score_failed, scorers=cfg.scorers, max_turns=cfg.agent.get("max_turns")),
        RunFacts(wall_time_s=time.perf_counter() - timeline.started, complete=not interrupted,
                 deterministic_agent=getattr(agent, "deterministic", None), degraded_tools=degraded_tools,
                 tools_offered=len(tool_specs), started_at=timeline.started_at),
        asked=lambda key: key not in not_asked,
    )
    for warning in summary.warnings:
        logger.warning("%s", warning)
    timeline.mark("scored")
    logger.info("Timeline (seconds since start): %s", timeline.line())
    print_summary(summary, out)
    return summary


def _run_holding_lock(cfg: RunConfig, on_event: Callable[[str, AnyEvent], None] | None,
                      on_task: Callable[[TaskResult], None] | None) -> RunOutcome:
    timeline = Timeline()
    gateway_file = load_gateway_file(cfg.gateway_config_path)
    # A key no served module takes fails here, before data, gateway or Ray; an unknown tool group is refused by the
    # gateway (`gateway_for_run`), and a file that leaves the agent no tool fails here too.
    gateway_file.check_served(SERVED_RESOURCE_TYPES)
    keep_rag_modules(gateway_file, cfg.gateway_config_path)
    agent = check_agent(cfg)
    load_scorers(cfg.scorers)  # a scorer that does not import fails now, not once every task has run
    data = prepare_data(cfg.dataset, cfg.cache_dir)
    out = cfg.output_dir
    (out / STATS_DIR).mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        start_fresh(out)
    n_questions = len(data.questions)
    logger.info("Mode %s: %d questions, gateway file %s", cfg.mode_name, n_questions, cfg.gateway_config_path)
    timeline.mark("data")

    interrupted = False
    # The gateway loads its encoder and indexes while Ray starts.
    with gateway_for_run(cfg, data.corpus_path) as gateway, ray_session(cfg):
        timeline.mark("ray up")
        # Worker processes start (and import) while the gateway loads its encoder and indexes.
        actors = start_actors(cfg, min(cfg.workers, n_questions * cfg.repeats))
        url = gateway.wait_ready()
        timeline.mark("gateway ready")
        logger.info("Gateway ready at %s", url)
        run_id = uuid.uuid4().hex
        if isinstance(gateway, GatewayProcess):
            # Its calls go to this run's ledger, whichever run launched the gateway (a sweep's jobs share one). A
            # Serve gateway and one the user runs keep their stats where they were started.
            gateway.register_run(run_id, out)
        env_spec = env_spec_for(cfg, url, run_id=run_id)
        tool_specs, degraded_tools = offered_tools(env_spec)
        check_agent_tools(agent, tool_specs)
        finished = finished_tasks(out, RunIdentity.of(cfg, tool_specs, data))
        # The specs whose hashes the fingerprint holds, for whoever trains on this folder's conversations
        # (rollout.export): a resumed run that got here offers the very same ones.
        write_tools(out, RunTools(tool_specs, gateway_file.dynamic_toolsets))
        timeline.mark("tools listed")
        (out / CONFIG_FILE).write_text(OmegaConf.to_yaml(OmegaConf.create(cfg.to_dict())), encoding="utf-8")
        resumed = plan_resume(finished, data.questions, cfg.repeats)
        total = n_questions * cfg.repeats
        already = resumed.already
        if already:
            logger.info("Resuming: %d of %d tasks already finished in %s", already, total, out)
        ran: Counter[str] = Counter()
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

            scheduler = Scheduler(
                cfg, env_spec, on_result=on_result,
                gateway=gateway if isinstance(gateway, GatewayProcess) else None,
                on_events=on_events if cfg.watch else None, actors=actors,
            )
            try:
                scheduler.run(tasks_to_run(data.questions, cfg.repeats, cfg.seed, finished), total - already)
            except KeyboardInterrupt:
                interrupted = True
                logger.warning("Interrupted: stopping the workers; finished tasks are saved")
        timeline.mark("all results")
        # The summary is on screen before Ray and the gateway stop: every record is in trajectory.jsonl already,
        # and their shutdown (a second or more) need not keep the user from the scores.
        summary = _score_and_print(cfg, out, agent, timeline, interrupted, resumed.not_asked, tool_specs,
                                   degraded_tools)
        tool_report = _tool_report_once_stopped(out, gateway) if isinstance(gateway, GatewayProcess) else None
    if tool_report is not None:
        tool_report.result()  # the report's own error, if any, is raised here
    elif not cfg.gateway.url:  # a Ray Serve gateway: stopped with the with-block above
        write_tool_report(out)
    timeline.mark("stopped")
    logger.debug("Timeline after the summary: %s", timeline.line())
    if interrupted:
        raise RunInterrupted(
            f"interrupted with {summary.n} of {total} tasks finished, saved in {out}. "
            "Run the same command again to resume"
        )
    return RunOutcome(out, summary, dict(ran))
