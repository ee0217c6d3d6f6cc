"""`python -m rollout.report tool-stats PATH...`, `... compare DIR...`, `... judge RUN...` and `... rescore RUN...`
(also `rollout report ...`): reports rebuilt from run folders.

Subcommands are argparse subparsers, each with its own `run` function, so another report is
one more `add_parser` call.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rollout.console import ReadableConsole, percent
from rollout.errors import NotARunFolderError, ReportError, RolloutError
from rollout.report.judge.arguments import add_judge_parser
from rollout.report.printed import degraded_lines
from rollout.report.tool_calls.windows import BY_CHOICES, TRAFFIC_CHOICES, Windowing
from rollout.run_folder import STATS_DIR

if TYPE_CHECKING:
    from rollout.report.tool_calls.use import ToolUse

# Each subcommand imports what it runs on when it runs: pandas (tool-stats), matplotlib (compare, --by) and the
# judge's LLM client (judge) would otherwise be loaded by every report command, about a second of its start.


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _failures(row: dict[str, Any]) -> str:
    counts = {k.removeprefix("outcome_"): v for k, v in row.items() if k.startswith("outcome_") and k != "outcome_ok"}
    return ", ".join(f"{k}={v}" for k, v in counts.items() if v) or "-"


def _table(title: str, columns: Sequence[str], text_columns: frozenset[str] = frozenset()) -> Table:
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 or col in text_columns else "right", overflow="fold")
    return table


def _calls_table(title: str, key: str, rows: list[dict[str, Any]]) -> Table:
    """Counts, server and round-trip quantiles, and context tokens per call (over the calls that reported
    accounting); tool LLM tokens per call only when some tool made LLM calls."""
    with_llm = any(r.get("llm_tokens_mean") for r in rows)
    columns = (key, "calls", "failed", "success", "p50 ms", "p95 ms", "p99 ms", "rtt p50", "rtt p95", "rtt p99",
               "ctx tok p50", "ctx tok p95", "ctx tok mean", *(["LLM tok/call"] if with_llm else []), "failures")
    table = _table(title, columns)
    for r in rows:
        table.add_row(
            _fmt(r[key]), str(r["total_calls"]), str(r["failed_calls"]), percent(r["success_rate"]),
            _fmt(r["p50_ms"]), _fmt(r["p95_ms"]), _fmt(r["p99_ms"]),
            _fmt(r["rtt_p50_ms"]), _fmt(r["rtt_p95_ms"]), _fmt(r["rtt_p99_ms"]),
            _fmt(r.get("context_tokens_p50")), _fmt(r.get("context_tokens_p95")), _fmt(r.get("context_tokens_mean")),
            *([_fmt(r.get("llm_tokens_mean"))] if with_llm else []), _failures(r),
        )
    if not rows:
        table.add_row("(no calls)", *["-"] * (len(columns) - 1))
    return table


def _retrieval_table(title: str, key: str, rows: list[dict[str, Any]]) -> Table:
    table = _table(title, (key, "calls", "scored", "hit@1", "hit@3", "hit@5", "hit@all", "queries", "repeated", "repeat share"))
    for r in rows:
        table.add_row(
            _fmt(r[key]), str(r["retrieval_calls"]), str(r["scored_calls"]),
            *(percent(r[f"hit_at_{k}"]) for k in (1, 3, 5, "all")),
            str(r["query_calls"]), str(r["repeated_calls"]), percent(r["repeated_query_share"]),
        )
    if not rows:
        table.add_row("(no retrieval calls)", *["-"] * 9)
    return table


def _print_run(console: Console, report: dict[str, Any], path: Path) -> None:
    s = report["summary"]
    console.rule(f"tool stats · mode={s['mode']} · {s['run_dir']}")
    trajectory = "" if s["has_trajectory"] else " · no trajectory.jsonl: gateway-only stats"
    # Token columns are over the calls that reported accounting: say so when that is not every call.
    accounted = "" if s["accounted_calls"] == s["total_calls"] else f" · {s['accounted_calls']} reported accounting"
    console.print(
        f"{s['total_calls']} calls · {s['failed_calls']} failed · success {percent(s['success_rate'])}"
        f" · {s['tasks_with_calls']} tasks · {s['workers_with_calls']} workers{accounted}{trajectory}"
    )
    for line in degraded_lines(s.get("degraded_tools") or {}):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(_calls_table("per tool", "tool_name", report["tools"]))
    console.print(_calls_table("per worker", "worker_id", report["workers"]))
    if len(report.get("gateways", [])) > 1:  # replicas of a Ray Serve gateway
        console.print(_calls_table("per gateway replica", "served_by", report["gateways"]))
    console.print(_retrieval_table("retrieval", "tool_name", report["retrieval"]))
    console.print(f"Report: {path}")


def _check_run_folder(path: Path) -> None:
    if not path.is_dir():
        raise NotARunFolderError(f"{path}: no such folder")
    if not (path / STATS_DIR).is_dir():
        raise NotARunFolderError(f"{path}: no {STATS_DIR}/ folder here; pass a run folder such as results/<experiment>/<mode>")


def _counted_line(s: dict[str, Any]) -> str:
    """Which calls the report counted, by traffic, and how they are cut into windows."""
    seen = ", ".join(f"{n} {kind}" for kind, n in s["calls_by_traffic"].items())
    if s["traffic"] == "all":
        counted = f"{s['counted_calls']} calls counted, all traffic ({seen})"
    else:
        counted = f"{s['counted_calls']} of {s['ledger_calls']} calls counted: {s['traffic']} traffic only ({seen})"
    retrieve = f" · {s['via_retrieve_calls']} via /retrieve" if s["via_retrieve_calls"] else ""
    origin = f"from step {s['first_step']}" if s["by"] == "step" else "from the first call"
    trajectory = "" if s["has_trajectory"] else " · no trajectory.jsonl: the ledger alone"
    size = Windowing(s["by"], s["window"]).describe()
    return f"{counted}{retrieve} · {s['windows']} windows of {size} {origin}{trajectory}"


def _unplaced_line(s: dict[str, Any]) -> str | None:
    """One line for the counted calls no window holds; None when every call is in one."""
    n = s["unplaced_calls"]
    if not n:
        return None
    calls = f"{n} of the {s['counted_calls']} calls"
    if s["by"] == "step":
        return (f"{calls} {'carries' if n == 1 else 'carry'} no step, in no window (a trainer sends it with each call: "
                "step= over MCP, the X-Rollout-Step header on /retrieve); --by time counts them")
    return f"{calls} {'has' if n == 1 else 'have'} no time (never reached the gateway), in no window"


def _print_tool_use(console: Console, use: ToolUse, written: list[Path]) -> None:
    from rollout.report.tool_calls.use import records

    s = use.summary
    per_step = s["by"] == "step" and s["window"] == 1
    key = "step" if per_step else "steps" if s["by"] == "step" else "window"
    per = "step" if per_step else f"window of {Windowing(s['by'], s['window']).describe()}"
    console.rule(f"tool use by {s['by']} · {s['run_dir']}")
    console.print(_counted_line(s), markup=False, highlight=False, soft_wrap=True)
    if line := _unplaced_line(s):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    stats = ("depth", "p50 ms", "p95 ms", "errors")

    def stat_cells(r: dict[str, Any]) -> list[str]:
        return [_fmt(r["mean_returned"], 2), _fmt(r["p50_ms"]), _fmt(r["p95_ms"]), percent(r["error_share"])]

    shares = _table(f"tool share per {per}", (key, "calls", *use.tool_names, *stats))
    for r in records(use.windows):
        shares.add_row(r["window"], str(r["calls"]), *(percent(r[f"share_{t}"]) for t in use.tool_names),
                       *stat_cells(r))
    console.print(shares)
    detail = _table(f"per tool and {'step' if per_step else 'window'}", (key, "tool", "calls", "share", *stats))
    detail.columns[1].justify = "left"
    rows = records(use.tools)
    for i, r in enumerate(rows):
        last_of_window = i + 1 == len(rows) or rows[i + 1]["window"] != r["window"]
        detail.add_row(Text(r["window"]), Text(r["tool_name"]), str(r["calls"]), percent(r["share"]), *stat_cells(r),
                       end_section=last_of_window)
    console.print(detail)
    for path in written:
        console.print(f"Wrote: {path}", markup=False, highlight=False)


def run_tool_use(args: argparse.Namespace, console: Console) -> int:
    """`tool-stats --by step|time`: every folder is read and checked before anything is written."""
    from rollout.report.tool_calls.use import build_tool_use, output_paths, write_tool_use
    from rollout.report.tool_calls.use_plot import plot_tool_use

    traffic = args.traffic or "all"
    uses = [(Path(p), build_tool_use(p, args.by, args.window, traffic)) for p in args.paths]
    for path, use in uses:
        written = [*write_tool_use(path, use), plot_tool_use(use, output_paths(path, use.summary["by"])["plot"])]
        _print_tool_use(console, use, written)
    return 0


def run_tool_stats(args: argparse.Namespace, console: Console) -> int:
    if args.by:
        return run_tool_use(args, console)
    if args.window is not None or args.traffic is not None:
        raise ReportError("--window and --traffic go with --by step or --by time (e.g. --by step --traffic train)")
    from rollout.report.tool_calls.report import write_tool_report

    paths = [Path(p) for p in args.paths]
    for path in paths:
        _check_run_folder(path)
    modes = []
    for path in paths:
        out = write_tool_report(path)
        report = json.loads(out.read_text(encoding="utf-8"))
        _print_run(console, report, out)
        modes += [{**m, "run": str(path), "retrieval": report["summary"]["retrieval"]} for m in report["modes"]]
    if len({m["mode"] for m in modes}) < len(modes):  # the same mode in several folders: name the folder
        modes = [{**m, "mode": f"{m['mode']} ({m['run']})"} for m in modes]
    console.rule("per mode")
    console.print(_calls_table("per mode", "mode", modes))
    console.print(_retrieval_table("retrieval per mode", "mode", [{**m["retrieval"], "mode": m["mode"]} for m in modes]))
    return 0


def run_compare(args: argparse.Namespace, console: Console) -> int:
    from rollout.report.compare.comparison import compare_runs
    from rollout.report.compare.run_folders import common_parent, find_runs
    from rollout.report.compare.tables import TEXT_COLUMNS, comparison_tables, pair_sentence, write_comparison

    runs = find_runs(args.paths)
    comparison = compare_runs(runs, baseline=args.baseline, seed=args.seed, score_failed=args.score_failed,
                              allow_different_questions=args.allow_different_questions)
    if (line := comparison.question_set_line) is not None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line, whatever the width
    for title, headers, rows in comparison_tables(comparison):
        table = _table(title, headers, TEXT_COLUMNS)
        for row in rows:
            table.add_row(*map(Text, row))  # Text: a mode named like "[x]" is not markup
        console.print(table)
    for p in comparison.pairs:
        console.print(pair_sentence(p), markup=False, highlight=False, soft_wrap=True)
    for path in write_comparison(comparison, args.out or common_parent(runs)):
        console.print(f"Wrote: {path}", markup=False, highlight=False)
    return 0


def run_rescore(args: argparse.Namespace, console: Console) -> int:
    from rollout.report.compare.run_folders import find_runs
    from rollout.report.printed import print_summary
    from rollout.report.rescore import rescore

    runs = find_runs(args.paths)
    for run in runs:
        print_summary(rescore(run, scorers=args.scorer), run, console)
    return 0


def run_judge(args: argparse.Namespace, console: Console) -> int:
    from rollout.report.judge.command import run_judge as judge

    return judge(args, console)


def add_run_paths(parser: argparse.ArgumentParser, metavar: str) -> None:
    """The run folders a report reads: folders holding trajectory.jsonl, or their parents."""
    parser.add_argument(
        "paths", nargs="+", metavar=metavar,
        help="run folder(s) holding trajectory.jsonl, or a parent such as results/<experiment> (its run subfolders)",
    )


def build_parser(prog: str = "python -m rollout.report") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Reports rebuilt from run folders.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tool_stats = commands.add_parser(
        "tool-stats",
        help="per-tool, per-worker, per-mode call statistics and retrieval hit@k; rewrites tool_stats/report.json and "
             "CSVs (with --by step|time: tool use per trainer step or time window instead)",
    )
    tool_stats.add_argument("paths", nargs="+", metavar="PATH",
                            help="run folder(s) holding tool_stats/; with --by, also a gateway's --output-dir")
    tool_stats.add_argument(
        "--by", choices=BY_CHOICES,
        help="tool use over a training run instead: per trainer step or per window of time, each tool's calls, share, "
             "result depth, latency and errors; writes tool_stats/by_<step|time>.json, CSVs and PNG",
    )
    tool_stats.add_argument(
        "--window", metavar="SIZE",
        help="with --by step: steps per window (default 1); with --by time: seconds, or 30s, 5m, 1h (default 60s)",
    )
    tool_stats.add_argument("--traffic", choices=TRAFFIC_CHOICES,
                            help="with --by: count a trainer's calls (train), an evaluation's (eval) or all (default)")
    tool_stats.set_defaults(run=run_tool_stats)
    compare = commands.add_parser(
        "compare",
        help="metrics per mode and paired differences of every metric against a baseline; writes comparison.md, "
             "comparison.png, comparison.json and comparison.csv",
    )
    add_run_paths(compare, "DIR")
    compare.add_argument("--baseline", metavar="MODE", help="mode the others are paired against (default: the first run)")
    compare.add_argument("--out", metavar="DIR", type=Path, help="where to write the files (default: the runs' common parent)")
    compare.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    compare.add_argument(
        "--score-failed", action="store_true",
        help="score tasks that ended in error, timeout or infra_error as wrong answers (default: leave them out)",
    )
    compare.add_argument("--allow-different-questions", action="store_true",
                         help="pair runs of different question sets (default: refused, naming both sets)")
    compare.set_defaults(run=run_compare)
    rescore_cmd = commands.add_parser(
        "rescore",
        help="rebuild each run's evaluation_summary.json from its trajectory, config.yaml and scores/*.jsonl "
             "(its own scorers, a judge's scores) without rerunning it",
    )
    add_run_paths(rescore_cmd, "RUN")
    rescore_cmd.add_argument(
        "--scorer", action="append", metavar="NAME",
        help="a scorer package.module:function to score with instead of the run's scoring.scorers (repeatable)",
    )
    rescore_cmd.set_defaults(run=run_rescore)
    add_run_paths(add_judge_parser(commands, run_judge), "RUN")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m rollout.report") -> int:
    """Run one subcommand; user errors print one line to stderr and return 2."""
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s", stream=sys.stderr)
    try:
        return args.run(args, ReadableConsole())
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
