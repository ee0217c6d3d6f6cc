"""The summary as a run prints it: the scores table, the tool calls table, the warnings and the lines below them
(time and tokens per task, the endpoint, unfinished calls, degraded tools)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from rollout.accounting import AGENT, RunAccounting
from rollout.console import ReadableConsole
from rollout.report.browsecomp_leaderboard import print_block
from rollout.report.calibration import calibration_line
from rollout.report.endpoint import endpoint_line
from rollout.report.scoring import CI_LEVEL, METRICS, metric_label
from rollout.summary import RunSummary, ToolUse


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _repeats_line(summary: RunSummary) -> str | None:
    """E.g. "3 repeats · EM 95% CI [0.310, 0.420] · pass@1 0.367 · pass@3 0.500"; None with one repeat."""
    stats = summary.repeat_stats
    if summary.repeats <= 1 or stats is None:
        return None
    parts = [f"{summary.repeats} repeats"]
    for m, ci in stats.ci95.items():
        if ci is not None:
            parts.append(f"{metric_label(m)} {100 * CI_LEVEL:.0f}% CI [{ci[0]:.3f}, {ci[1]:.3f}]")
    parts += [f"pass@{k} {_fmt(v)}" for k, v in stats.pass_at_k.items()]
    for m, at_k in stats.pass_at_k_by_metric.items():
        parts += [f"{metric_label(m)} pass@{k} {_fmt(v)}" for k, v in at_k.items()]
    if summary.deterministic_agent:
        parts.append("agent is deterministic")
    return " · ".join(parts)


def _tools_table(summary: RunSummary) -> Table:
    """Calls and failures per tool, those of an interrupted run's unfinished tasks included; with accounting, each
    tool's stage and its mean cost per call (over the records' calls)."""
    costs = summary.accounting.tools if summary.accounting is not None else {}
    with_llm = any(t.llm_tokens_per_call for t in costs.values())
    columns = ["tool", "calls", "failed"]
    if costs:
        columns += ["stage", "context tokens/call", *(["tool LLM tokens/call"] if with_llm else []), "ms/call"]
    tools = Table(title="tool calls", title_justify="left")
    for col in columns:
        tools.add_column(col, justify="left" if col in ("tool", "stage") else "right")
    for name, use in _every_call(summary).items():
        row = [name, str(use.calls), str(use.failed)]
        if costs:
            t = costs.get(name)
            row += ["-", "-", *(["-"] if with_llm else []), "-"] if t is None else [
                t.stage or "-", _num(t.context_tokens_per_call, 1),
                *([_num(t.llm_tokens_per_call, 1)] if with_llm else []), _num(t.latency_ms_per_call, 1)]
        tools.add_row(*row)
    if not summary.tool_calls and not summary.unfinished_calls:
        tools.add_row("(none)", "0", "0", *["-"] * (len(columns) - 3))
    return tools


def _every_call(summary: RunSummary) -> dict[str, ToolUse]:
    """The records' calls per tool and, after Ctrl-C, those the unfinished tasks made: each call counted once."""
    none = ToolUse(0, 0)
    records, unfinished = summary.tool_calls, summary.unfinished_calls
    return {name: ToolUse(records.get(name, none).calls + unfinished.get(name, none).calls,
                          records.get(name, none).failed + unfinished.get(name, none).failed)
            for name in sorted({*records, *unfinished})}


def _unfinished_line(summary: RunSummary) -> str | None:
    """E.g. "Interrupted: 33 of these tool calls were made by tasks that had not finished ..."; None without any."""
    n = sum(t.calls for t in summary.unfinished_calls.values())
    if not n:
        return None
    return (f"Interrupted: {n} of these tool calls were made by tasks that had not finished, counted from the "
            "gateway's ledger (tool_stats/); no record holds them")


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _accounting_line(a: RunAccounting) -> str:
    """E.g. "Per task: 0.259 s (LLM 0.000, tools 0.051, waiting 0.208) · 718 context tokens (retrieval 718)"."""
    t = a.time_s
    parts = [f"Per task: {t.total:.3f} s (LLM {t.llm:.3f}, tools {t.tools:.3f}, waiting {t.waiting:.3f})"]
    by_stage = ", ".join(f"{stage} {n:,.0f}" for stage, n in a.tokens.items() if stage != AGENT and n)
    parts.append(f"{a.context_tokens:,.0f} context tokens" + (f" ({by_stage})" if by_stage else ""))
    if a.tool_llm_tokens:
        parts.append(f"{a.tool_llm_tokens:,.0f} tool LLM tokens")
    if a.agent_tokens:
        parts.append(f"{a.agent_tokens:,.0f} agent tokens")
    if a.calls_counted < a.calls:
        parts.append(f"{a.calls_counted} of {a.calls} calls reported accounting")
    return " · ".join(parts)


def degraded_lines(degraded: dict[str, str]) -> list[str]:
    """One line per tool served degraded, naming it and why; none when no tool was."""
    return [f"Degraded tool {name}: {reason}" for name, reason in degraded.items()]


def print_summary(summary: RunSummary, out_dir: Path, console: Console | None = None) -> None:
    console = console or ReadableConsole()  # piped or redirected, the table still prints whole
    m = summary.metrics
    partial = "" if summary.complete else " (interrupted)"
    counted = f"{summary.n} tasks" if summary.scored == summary.n else f"{summary.n} tasks, {summary.scored} scored"
    table = Table(title=f"rollout · mode={summary.mode} · {counted}{partial}", title_justify="left")
    metrics = [*METRICS, *summary.extra_metrics]
    for col in (*map(metric_label, metrics), "errors", "timeouts", "infra", "truncated", "out of ctx", "time (s)"):
        table.add_column(col, justify="right")
    table.add_row(
        *(_fmt(m.get(metric)) for metric in metrics),
        str(summary.errors), str(summary.timeouts), str(summary.infra_errors), str(summary.truncated),
        str(summary.out_of_context), f"{summary.wall_time_s:.1f}",
    )
    console.print(table)
    if summary.calibration is not None:
        console.print(calibration_line(summary.calibration), markup=False, highlight=False)
    if summary.browsecomp_plus is not None:
        print_block(console, summary.browsecomp_plus, out_dir)
    if line := _repeats_line(summary):
        console.print(line, markup=False, highlight=False)
    console.print(_tools_table(summary))
    if line := _unfinished_line(summary):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in [*degraded_lines(summary.degraded_tools), *(f"Warning: {w}" for w in summary.warnings)]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if tokens := summary.tokens:
        cost = f", ${tokens.cost_usd:.4f}" if tokens.cost_usd is not None else ""
        console.print(f"Tokens: {tokens.total:,} ({tokens.per_task:,.0f} per task{cost})")
    if summary.accounting is not None:
        console.print(_accounting_line(summary.accounting), markup=False, highlight=False)
    if summary.llm_endpoint is not None:
        console.print(endpoint_line(summary.llm_endpoint), markup=False, highlight=False, soft_wrap=True)
    console.print(f"Results: {Path(out_dir).resolve()}")
