"""`rollout report judge RUN ...`, and the judging a run with `judge.model` set does at its end.

Judging reads the run's trajectory, asks the judge about every scored answer it has no verdict for
(`rollout.report.judge.grader`), appends the verdicts to the judge's own file, rewrites `scores/judge.jsonl` and prints
the judge's metrics, its usage (apart from the agent's) and the table of exact match against the judge
(`rollout.report.judge.agreement`). The agent is never run again.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rollout.console import percent
from rollout.errors import RolloutError
from rollout.records import TaskKey, TaskResult
from rollout.report.compare.run_folders import find_runs
from rollout.report.judge.agreement import Agreement, Disagreement, agreement
from rollout.report.judge.arguments import DEFAULT_BASE_URL, SHOWN_DISAGREEMENTS
from rollout.report.judge.grader import (
    Judge,
    JudgeRecord,
    JudgeSettings,
    failed_task_metrics,
    judge_sync,
    needs_asking,
    reread,
)
from rollout.report.judge.store import (
    JudgeUsage,
    VerdictsFile,
    read_verdicts,
    verdicts_path,
    write_description,
    write_scores,
)
from rollout.report.rescore import rescore
from rollout.report.scoring import is_scored
from rollout.run_folder import iter_trajectory, read_config

logger = logging.getLogger(__name__)

DEFAULT_SAMPLING = {"temperature": 0.0, "max_tokens": 2048}
"""As conf/config.yaml's `judge:` block: greedy, and simple-evals' grader budget of 2048 tokens."""


CLI_NAMES = {"model": "--model NAME", "base_url": "--base-url URL", "preset": "--preset",
             "concurrency": "--concurrency N", "api_key_env": "--api-key-env", "timeout_s": "--timeout-s",
             "max_retries": "--max-retries", "sampling": "--temperature / --max-tokens",
             "sampling.max_tokens": "--max-tokens",
             "prices": "--price-prompt / --price-completion", "block": "judge"}
"""The command's options, by the judge setting each replaces; a setting no option names comes from the run's own
`judge:` block, and is named there."""


@dataclass(frozen=True, slots=True)
class RunJudging:
    """What judging one run did and found."""

    run_dir: Path
    settings: JudgeSettings
    scored: int
    """Tasks the run scores."""
    asked: int
    """Verdicts asked for now (the others were in the judge's file already)."""
    failed_tasks: int
    """Failed tasks the run scores (`score_failed`): wrong without asking."""
    unparsed: int
    """Replies that could not be parsed: flagged, their metrics None."""
    request_errors: int
    """Requests that failed after their retries: asked again by the next judging."""
    means: dict[str, float | None]
    """Each metric's mean over the scored tasks that have it."""
    usage: JudgeUsage
    agreement: Agreement
    wall_s: float


def _tasks(run_dir: Path, *, messages: bool = False) -> list[TaskResult]:
    """The record of each task, the first line of each (id, repeat) as scoring, `report compare` and the viewer take
    it (with its `messages` when asked)."""
    tasks: dict[TaskKey, TaskResult] = {}
    for task in iter_trajectory(run_dir, keep=("messages",) if messages else ()):
        tasks.setdefault(task.key, task)
    return list(tasks.values())


def judge_run(run_dir: Path, settings: JudgeSettings) -> RunJudging:
    """Judge one run folder (see the module docstring); `JudgeError` when the judge cannot be asked at all."""
    score_failed = bool((read_config(run_dir) or {}).get("score_failed", False))
    tasks = _tasks(run_dir, messages=settings.preset.reads_response)
    scored = [t for t in tasks if is_scored(t.status, score_failed=score_failed)]
    answered = [t for t in scored if t.status == "ok"]
    verdicts = {key: reread(record, settings.preset)
                for key, record in read_verdicts(verdicts_path(run_dir, settings.key)).items()}
    to_ask = [t for t in answered if needs_asking(t, verdicts.get(t.key), settings.preset)]
    wall_s = 0.0
    if to_ask:
        logger.info("Judging %d answers of %s with %s", len(to_ask), run_dir, settings.key)
        with VerdictsFile(run_dir, settings.key) as file:

            def keep(record: JudgeRecord) -> None:
                verdicts[record.key] = record
                file.append(record)

            wall_s = judge_sync(Judge(settings), to_ask, keep)
    rows = [{"id": t.id, "repeat": t.repeat, "metrics": _task_metrics(t, verdicts, settings)} for t in scored]
    write_scores(run_dir, rows, settings)
    kept = [verdicts[t.key] for t in answered if t.key in verdicts]
    usage = JudgeUsage.of(kept)
    write_description(run_dir, settings, usage)
    return RunJudging(
        run_dir, settings, len(scored), len(to_ask), len(scored) - len(answered),
        unparsed=sum(r.unparsed for r in kept), request_errors=sum(r.error is not None for r in kept),
        means=_means(rows, settings), usage=usage, agreement=agreement(answered, verdicts), wall_s=wall_s,
    )


def _task_metrics(task: TaskResult, verdicts: Mapping[TaskKey, JudgeRecord],
                  settings: JudgeSettings) -> dict[str, float | None]:
    if task.status != "ok":
        return failed_task_metrics(settings.preset)
    record = verdicts.get(task.key)
    return dict(record.metrics) if record is not None else settings.preset.unparsed().metrics


def _means(rows: list[dict[str, Any]], settings: JudgeSettings) -> dict[str, float | None]:
    means: dict[str, float | None] = {}
    for metric in settings.preset.metrics:
        values = [v for row in rows if (v := row["metrics"].get(metric)) is not None]
        means[metric] = sum(values) / len(values) if values else None
    return means


def judge_and_report(run_dir: Path, settings: JudgeSettings, console: Console, *, show_all: bool = False,
                     rescore_run: bool = True) -> RunJudging:
    """Judge one run, rebuild its evaluation_summary.json with the judge's metrics (`rescore`; a run judging itself
    before it scores says `rescore_run=False`) and print what the judging found."""
    judging = judge_run(run_dir, settings)
    if rescore_run:
        rescore(run_dir)
    print_judging(console, judging, show_all=show_all)
    return judging


def settings_for(run_dir: Path, args: argparse.Namespace) -> JudgeSettings:
    """The judge for `run_dir`: the run's own `judge:` block when its config has one, each option given replacing
    its value."""
    block = dict((read_config(run_dir) or {}).get("judge") or {})
    given = {"base_url": args.base_url, "model": args.model, "preset": args.preset, "concurrency": args.concurrency,
             "api_key_env": args.api_key_env, "timeout_s": args.timeout_s, "max_retries": args.max_retries}
    block.update({k: v for k, v in given.items() if v is not None})
    block.setdefault("base_url", DEFAULT_BASE_URL)
    block["sampling"] = {**DEFAULT_SAMPLING, **(block.get("sampling") or {}),
                         **{k: v for k, v in (("temperature", args.temperature), ("max_tokens", args.max_tokens))
                            if v is not None}}
    if args.price_prompt is not None or args.price_completion is not None:
        block["prices"] = {"prompt": args.price_prompt, "completion": args.price_completion}
    return JudgeSettings.from_config(block, CLI_NAMES)


def run_judge(args: argparse.Namespace, console: Console) -> int:
    runs = find_runs(args.paths)
    judges = [(run, settings_for(run, args)) for run in runs]  # every setting checked before any request
    for run, settings in judges:
        judge_and_report(run, settings, console, show_all=args.disagreements)
    return 0


def print_judging(console: Console, j: RunJudging, *, show_all: bool = False) -> None:
    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    console.rule(f"judge {j.settings.key} · {j.run_dir}")
    say(f"{j.scored} scored tasks · {j.asked} asked now · {j.scored - j.failed_tasks - j.asked} verdicts kept from "
        f"earlier · {j.failed_tasks} failed tasks wrong without asking")
    say(" · ".join(f"{m} {percent(v)}" for m, v in j.means.items()))
    if j.unparsed or j.request_errors:
        say(f"no verdict: {j.unparsed} replies could not be parsed (metrics None, raw replies kept in "
            f"{verdicts_path(j.run_dir, j.settings.key)}) · {j.request_errors} requests failed (asked again next "
            "time)")
    u = j.usage
    cost = "" if u.cost_usd is None else f" · ${u.cost_usd:.4f}"
    latency = ("" if u.latency_ms_mean is None
               else f" · latency mean {u.latency_ms_mean:.0f} ms, p95 {u.latency_ms_p95:.0f} ms")
    say(f"judge usage (apart from the agent's): {u.verdicts} verdicts · {u.requests} requests · "
        f"{u.total_tokens} tokens{cost}{latency}")
    a = j.agreement
    say(f"exact match and the judge agree on {percent(a.rate)} of {a.judged} judged answers")
    table = Table()
    for column in ("", "judge right", "judge wrong"):
        table.add_column(column, justify="right" if column else "left")
    table.add_row("EM right", str(a.both_right), str(len(a.em_only)))
    table.add_row("EM wrong", str(len(a.judge_only)), str(a.both_wrong))
    console.print(table)
    for title, cell in (("EM right, judge wrong", a.em_only), ("judge right, EM wrong", a.judge_only)):
        if cell:
            shown = cell if show_all else cell[:SHOWN_DISAGREEMENTS]
            more = "" if len(shown) == len(cell) else f" (first {len(shown)}; --disagreements lists all)"
            say(f"{title}: {len(cell)}{more}")
            for d in shown:
                console.print(_disagreement_line(d), highlight=False, soft_wrap=True)


def _disagreement_line(d: Disagreement) -> Text:
    repeat = f"#{d.repeat}" if d.repeat else ""
    gold = " | ".join(d.golden_answers)
    return Text(f"  {d.id}{repeat} · said {d.prediction!r} · gold {gold!r} · judge {d.label}")


def judge_finished_run(run_dir: Path, settings: JudgeSettings, console: Console) -> RunJudging | None:
    """The judging at the end of a run: a judge that fails leaves the run as it is (the error says how to judge it
    later) instead of failing a run whose trajectory is complete."""
    try:
        return judge_and_report(run_dir, settings, console, rescore_run=False)
    except RolloutError as e:
        logger.error("Judging %s failed: %s. The run is complete; judge it again with: rollout report judge %s",
                     run_dir, e, run_dir)
        return None
