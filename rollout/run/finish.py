"""The run's last stages: its answers judged (when a judge is configured), scored and printed, and its tool report.

The summary is on screen before Ray and the gateway stop: every record is in trajectory.jsonl already, and their
shutdown (a second or more) need not keep the user from the scores. The tool report follows once the gateway's
ledger is complete (`RunGateway.report_when_stopped`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout.console import ReadableConsole
from rollout.records import TaskKey
from rollout.report.printed import print_summary
from rollout.report.rescore import RunFacts, ScoringConfig, score_folder
from rollout.run.timeline import Timeline
from rollout.summary import RunSummary

if TYPE_CHECKING:
    from rollout.report.judge.grader import JudgeSettings

logger = logging.getLogger(__name__)


def score_and_print(out: Path, scoring: ScoringConfig, judge: JudgeSettings | None, agent: object,
                    timeline: Timeline, interrupted: bool, not_asked: Container[TaskKey],
                    tool_specs: list[dict[str, Any]], degraded_tools: dict[str, str]) -> RunSummary:
    """Judge (with `judge` set), score and print the run's summary; returns it."""
    if not interrupted and judge is not None:
        from rollout.report.judge.command import judge_finished_run  # the judge's client, for judged runs only

        judge_finished_run(out, judge, ReadableConsole())  # its scores file joins the summary below
    # The trajectory holds this run's tasks and those of earlier runs into the folder: only the latter may be
    # tasks this run no longer asks.
    summary = score_folder(
        out, scoring,
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
