"""Score a run folder into its evaluation_summary.json: at the end of a run, and again later without rerunning.

`score_folder` is the one way a folder is scored: the run's own scorers (`scoring.scorers`) score its tasks into
`scores/user.jsonl`, every scores file is read, and the trajectory is summarised with them (`summarize`). The driver
calls it when a run ends; `rescore` calls it on a finished folder, with the settings its config.yaml recorded and the
run-level facts the trajectory cannot tell (wall time, whether the run finished, whether its agent is
deterministic, its degraded tools) read back from its summary. After an LLM judge writes `scores/judge.jsonl`, or
once a scorer is fixed, `rollout report rescore RUN` brings the summary up to date.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rollout.errors import NotARunFolderError, ReportError
from rollout.records import TaskKey
from rollout.report.extra_scores import read_scores, write_scores
from rollout.report.scoring import is_scored, summarize
from rollout.report.unfinished import UnfinishedCalls
from rollout.report.user_scorers import USER_SCORES, load_scorers, score_records
from rollout.run_folder import (
    CONFIG_FILE,
    TRAJECTORY_FILE,
    is_run_folder,
    iter_trajectory,
    read_config,
    read_summary,
    write_summary,
)
from rollout.summary import RunSummary, ToolUse

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a summary says about the run that its trajectory cannot: the driver knows these when the run ends."""

    wall_time_s: float = 0.0
    complete: bool = True
    deterministic_agent: bool | None = None
    degraded_tools: dict[str, str] = field(default_factory=dict)
    tools_offered: int | None = None
    started_at: float | None = None
    """Unix time the run started: an interrupted run (`complete` False) counts the tool calls its unfinished tasks
    made from the gateway's ledger lines since then (`rollout.report.unfinished`)."""
    unfinished_calls: dict[str, ToolUse] = field(default_factory=dict)
    """The unfinished tasks' calls an interrupted run's summary counted: a rescore, which knows no `started_at`,
    keeps them (its trajectory is the one they were counted against)."""


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """The scoring settings of a run (config.yaml's `mode_name`, `gateway_config_path`, `score_failed`, `repeats`,
    `scoring:` block and `agent.max_turns`)."""

    mode: str
    gateway_file: str
    score_failed: bool = False
    scorers: tuple[str, ...] = ()
    """`scoring.scorers`: the user's own scorers, `package.module:function`."""
    max_turns: int | None = None
    """`agent.max_turns`: with 1 the agent had no turn for tools, so a run without tool calls says that, not that the
    server withheld them (None when the agent has no such setting)."""


def score_folder(run_dir: Path | str, cfg: ScoringConfig, facts: RunFacts, *,
                 asked: Callable[[TaskKey], bool] | None = None) -> RunSummary:
    """Score the run's tasks (those `asked` keeps, default all) with its scorers and scores files, write
    evaluation_summary.json and return it. Without scorers an existing `scores/user.jsonl` is kept as it is."""
    run_dir = Path(run_dir)
    scorers = load_scorers(cfg.scorers)
    if scorers:
        records = (r.to_json() for r in iter_trajectory(run_dir, full=True)
                   if (asked is None or asked(r.key)) and is_scored(r.status, score_failed=cfg.score_failed))
        path = write_scores(run_dir, USER_SCORES, score_records(scorers, records),
                            meta={"source": USER_SCORES, "scorers": list(cfg.scorers)})
        logger.info("Scored with %s into %s", ", ".join(cfg.scorers), path)
    # After Ctrl-C the unfinished tasks' calls are in the gateway's ledger alone.
    interrupted = not facts.complete and facts.started_at is not None
    unfinished = UnfinishedCalls.since(run_dir, facts.started_at) if interrupted else None
    summary = summarize(
        # Messages kept: the final one states the answer's confidence (calibration); events: each request's prompt
        # tokens, against what the tools returned (`rollout.report.tool_calls.reach`), its timings
        # (`rollout.report.endpoint`), and the turns compared for repeats (`rollout.repetition`).
        (r for r in iter_trajectory(run_dir, keep=("messages", "events")) if asked is None or asked(r.key)),
        mode=cfg.mode, gateway_file=cfg.gateway_file, wall_time_s=facts.wall_time_s, complete=facts.complete,
        score_failed=cfg.score_failed, deterministic_agent=facts.deterministic_agent,
        degraded_tools=facts.degraded_tools, tools_offered=facts.tools_offered, extra=read_scores(run_dir),
        scorers=cfg.scorers, max_turns=cfg.max_turns,
        unfinished=unfinished,
    )
    if unfinished is None and not facts.complete and facts.unfinished_calls:
        summary = replace(summary, unfinished_calls=dict(facts.unfinished_calls))
    write_summary(run_dir, summary)
    return summary


def rescore(run_dir: Path | str, *, scorers: Sequence[str] | None = None) -> RunSummary:
    """Rebuild the run folder's evaluation_summary.json from its trajectory, config.yaml and scores files, without
    running anything; `scorers` replaces the config's `scoring.scorers` when given. Returns the new summary.

    Tasks of repeats the config no longer asks are left out, as the run leaves them out; a folder resumed with a
    smaller `dataset.limit` is rescored over every question it holds."""
    run_dir = Path(run_dir)
    if not is_run_folder(run_dir):
        raise NotARunFolderError(f"{run_dir}: no {TRAJECTORY_FILE} here; pass a run folder such as "
                                 "results/<experiment>/<mode>")
    config = read_config(run_dir)
    if config is None:
        raise ReportError(f"{run_dir}: no readable {CONFIG_FILE}; a run writes it when it starts, so rescore a folder "
                          "a run made (or rerun it: `python -m rollout output_dir=...` resumes)")
    configured = (config.get("scoring") or {}).get("scorers") or []
    cfg = ScoringConfig(
        mode=str(config.get("mode_name") or run_dir.name), gateway_file=str(config.get("gateway_config_path", "")),
        score_failed=bool(config.get("score_failed", False)),
        scorers=tuple(map(str, configured if scorers is None else scorers)),
        max_turns=(config.get("agent") or {}).get("max_turns"),
    )
    earlier = read_summary(run_dir)
    facts = RunFacts() if earlier is None else RunFacts(
        wall_time_s=earlier.wall_time_s, complete=earlier.complete,
        deterministic_agent=earlier.deterministic_agent, degraded_tools=dict(earlier.degraded_tools),
        tools_offered=earlier.tools_offered, unfinished_calls=dict(earlier.unfinished_calls),
    )
    repeats = int(config.get("repeats") or 0)
    return score_folder(run_dir, cfg, facts, asked=(lambda key: key[1] < repeats) if repeats else None)
