"""Rendering for `python -m rollout.view`: a task's replay and one-line live events (the task table:
`rollout.view.task_table`).

Everything here builds `rich.text.Text` with explicit styles rather than markup strings: the texts
are model output, queries and tool results, and a "[b]" inside one must print as written, not
switch on bold. Render functions take the console so tests can record what they print.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rollout.accounting import TaskAccounting
from rollout.events import (
    CUT_AT_LIMIT,
    AnyEvent,
    CompletionEvent,
    ErrorEvent,
    LLMOutputEvent,
    LLMThinkingEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.records import TaskResult
from rollout.relevance_view import is_relevance_view
from rollout.repetition import TaskRepeats, task_repeats
from rollout.report.metrics import exact_match

STATUS_STYLE = {"ok": "green", "error": "bold red", "timeout": "bold red", "infra_error": "bold red"}
KIND_WIDTH = 7
"""Width of the event-kind column ("result", "answer", ...)."""
INDENT = " " * (10 + KIND_WIDTH + 1)
"""Continuation lines of a replayed event start under its gist."""
TOOL_PREFIX = "query_knowledge_base_"
"""Dropped from tool names in live lines: `dense(...)` says what `query_knowledge_base_dense(...)` does."""


@dataclass(frozen=True, slots=True)
class Clip:
    """How much of long texts a replay shows; `Clip.full()` shows everything (`--full`)."""

    chars: int = 400
    lines: int = 8
    result_lines: int = 3
    line_chars: int = 200
    ids: int = 5

    @classmethod
    def full(cls) -> Clip:
        big = 1 << 62
        return cls(chars=big, lines=big, result_lines=big, line_chars=big, ids=big)


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


def _lines(text: str, max_lines: int, line_chars: int) -> list[str]:
    lines = text.splitlines() or [""]
    shown = [clip(line, line_chars) for line in lines[:max_lines]]
    if len(lines) > max_lines:
        shown.append(f"… (+{len(lines) - max_lines} lines)")
    return shown


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def number_text(n: float | None) -> str:
    """A count with thousands separators, "-" when unknown."""
    return "-" if n is None else f"{int(n):,}"



# --- replay of one task -------------------------------------------------------------------------


def _header(console: Console, task: TaskResult, repeats: TaskRepeats) -> None:
    console.rule(Text(f"task {task.id}", style="bold"))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    em = exact_match(task.prediction, task.golden_answers)
    grid.add_row("question", Text(task.question))
    grid.add_row("gold", Text(" | ".join(task.golden_answers) or "-"))
    grid.add_row("prediction", Text(task.prediction or "-", style="green" if em else "yellow")
                 + Text(f"  EM {em:.0f}", style="bold"))
    run = Text()
    run.append(task.status, style=STATUS_STYLE.get(task.status, "yellow"))
    if task.truncated:
        run.append(" (answer cut at max_tokens)", style="yellow")
    if task.out_of_turns:
        run.append(" (out of turns)", style="yellow")
    if task.out_of_context:
        run.append(" (out of context)", style="yellow")
    if task.no_answer_tag:
        run.append(" (no answer tag)", style="yellow")
    if task.unreadable_call:
        run.append(" (tool call the server could not read)", style="yellow")
    run.append(f" · worker {task.worker_id} · attempts {task.attempts} · {task.turns} turns"
               f" · {len(task.tool_calls)} tool calls · {task.latency_s:.2f} s")
    if repeats.loops:  # each repeat is marked where it happens below
        run.append(f" · {len(repeats.repeats_of)} repeated calls, {len(repeats.repeated_turns)} repeated turns",
                   style="yellow")
    grid.add_row("status", run)
    if task.stop_message:
        grid.add_row("stopped", Text(task.stop_message, style="yellow"))
    if task.usage:
        parts = [f"{k.removesuffix('_tokens')} {number_text(v)}" for k, v in task.usage.items() if k != "cost_usd"]
        if "cost_usd" in task.usage:
            parts.append(f"cost ${task.usage['cost_usd']:.4f}")
        grid.add_row("usage", " · ".join(parts))
    if task.error:
        grid.add_row("error", Text(task.error, style="red"))
    console.print(grid)


def finish_note(finish_reason: str | None) -> str:
    """How an LLM output's finish_reason shows beside it: nothing when the model stopped by itself (`stop`,
    `tool_calls`, or none sent), "(cut at max_tokens)" for `length`, the reason as sent otherwise."""
    if finish_reason in (None, "stop", "tool_calls"):
        return ""
    if finish_reason == CUT_AT_LIMIT:
        return "(cut at max_tokens)"
    return f"(finish_reason {finish_reason})"


def _kind(kind: str, style: str, gist: Text | str) -> Text:
    """The event-kind column and the gist after it (shared by replay and live lines)."""
    return Text(f"{kind:<{KIND_WIDTH}} ", style=style) + (gist if isinstance(gist, Text) else Text(gist))


def _event_line(offset: str, kind: str, style: str, gist: Text | str) -> Text:
    return Text(f"{offset:>9} ", style="dim") + _kind(kind, style, gist)


def _body(console: Console, text: str, style: str, chars: int, max_lines: int, line_chars: int | None = None) -> None:
    """Text under an event, indented under its gist; wrapped, or cut per line (tool results)."""
    shown = _lines(clip(text, chars), max_lines, line_chars or len(text) + 1)
    console.print(Padding(Text("\n".join(shown), style=style), (0, 0, 0, len(INDENT)), expand=False))


def _ids(ids: list[str], clip_: Clip) -> str:
    if not ids:
        return ""
    more = f", … (+{len(ids) - clip_.ids})" if len(ids) > clip_.ids else ""
    return f" · {len(ids)} ids: {', '.join(map(str, ids[:clip_.ids]))}{more}"


def _render_event(console: Console, e: AnyEvent, offset: str, clip_: Clip, cut_replies: dict[str, int],
                  repeats: tuple[dict[str, str], dict[int, str]]) -> None:
    """One replayed event; `cut_replies` maps a tool call's id to its own LLM replies cut at their token limit,
    `repeats` a repeated call's id and a repeated turn's number to its mark (`TaskRepeats.call_marks`, `turn_marks`)."""
    match e:
        case LLMOutputEvent():
            meta = [f"turn {e.turn}"]
            if e.latency_ms:
                meta.append(f"{e.latency_ms:.0f} ms")
            if e.usage:
                meta.append(f"{number_text(e.usage.get('total_tokens'))} tok")
            gist = Text(" · ".join(meta))
            if stopped := finish_note(e.finish_reason):
                gist.append(f" {stopped}", style="yellow")
            if mark := repeats[1].get(e.turn):
                gist.append(f" ({mark})", style="yellow")
            console.print(_event_line(offset, "llm", "bold blue", gist))
            if e.content:
                _body(console, e.content, "", clip_.chars, clip_.lines)
            for call in e.tool_calls:
                console.print(Text(INDENT) + Text("→ ", style="blue") + Text(str(call.get("name")), style="cyan")
                              + Text(" " + clip(compact_json(call.get("arguments", {})), clip_.line_chars)))
        case LLMThinkingEvent():
            console.print(_event_line(offset, "think", "dim", Text(f"turn {e.turn}", style="dim")))
            _body(console, e.content, "dim italic", clip_.chars, clip_.lines)
        case ToolCallEvent():
            gist = Text(e.name, style="cyan") + Text(
                " " + clip(compact_json(e.arguments), clip_.line_chars)) + Text(f" · {e.call_id}", style="dim")
            if mark := repeats[0].get(e.call_id):
                gist.append(f" ({mark})", style="yellow")
            console.print(_event_line(offset, "call", "cyan", gist))
        case ToolResultEvent():
            gist = Text(e.outcome, style="green" if e.ok else "bold red")
            gist.append(f" · {e.latency_ms:.0f} ms · {e.name}{_ids(e.result_ids, clip_)}")
            if cut := cut_replies.get(e.call_id):
                gist.append(f" ({cut} LLM {'reply' if cut == 1 else 'replies'} cut at max_tokens)", style="yellow")
            console.print(_event_line(offset, "result", "green" if e.ok else "red", gist))
            if is_relevance_view(e.text):  # compact by design: the chart the agent read, shown whole
                _body(console, e.text, "", len(e.text), len(e.text.splitlines()), clip_.line_chars)
            else:
                _body(console, e.text, "" if e.ok else "red", clip_.chars, clip_.result_lines, clip_.line_chars)
        case CompletionEvent():
            gist = Text(e.prediction, style="bold green") + Text(f" · {e.turns} turns", style="dim")
            console.print(_event_line(offset, "answer", "bold green", gist))
        case ErrorEvent():
            gist = Text(f"{e.kind}: {e.message}", style="bold red")
            console.print(_event_line(offset, "error", "bold red", gist))


def _render_messages(console: Console, task: TaskResult, clip_: Clip, repeats: TaskRepeats) -> None:
    """Older records have no events: show the conversation, then the recorded tool calls."""
    console.print(Text("no events in this record (an older run): its messages and tool calls", style="dim"))
    for m in task.messages:
        role = str(m.get("role", "?"))
        style = {"system": "dim", "user": "bold", "assistant": "blue", "tool": ""}.get(role, "")
        ref = f" [{m['tool_call_id']}]" if m.get("tool_call_id") else ""
        console.print(Text(f"{role}{ref}", style=style or "dim"))
        if m.get("content") and role == "tool":
            _body(console, str(m["content"]), "", clip_.chars, clip_.result_lines, clip_.line_chars)
        elif m.get("content"):
            _body(console, str(m["content"]), "dim" if role == "system" else "", clip_.chars, clip_.lines)
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            text = args if isinstance(args, str) else compact_json(args)
            console.print(Text(INDENT) + Text("→ ", style="blue") + Text(str(fn.get("name")), style="cyan")
                          + Text(" " + clip(text, clip_.line_chars)))
    if task.tool_calls:
        console.print(Text("tool calls", style="bold"))
        t0 = min(c.started for c in task.tool_calls)
        for i, c in enumerate(task.tool_calls):
            offset = f"+{c.started - t0:.3f}s"
            gist = Text(c.name, style="cyan") + Text(" " + clip(compact_json(c.arguments), clip_.line_chars))
            gist.append(f" → {c.outcome}", style="green" if c.ok else "bold red")
            gist.append(f" · {c.latency_ms:.0f} ms{_ids(c.result_ids, clip_)}")
            if i in repeats.repeats_of:
                gist.append(f" (repeats call {repeats.repeats_of[i] + 1})", style="yellow")
            console.print(_event_line(offset, "call", "cyan", gist))
            if c.error:
                _body(console, c.error, "red", clip_.chars, clip_.result_lines, clip_.line_chars)
    if task.error:
        console.print(_event_line("", "error", "bold red", Text(f"{task.status}: {task.error}", style="bold red")))
    else:
        console.print(_event_line("", "answer", "bold green", Text(task.prediction, style="bold green")))


def render_task(console: Console, task: TaskResult, *, full: bool = False) -> None:
    """Replay one task: its header, then each event with its offset from the first one."""
    clip_ = Clip.full() if full else Clip()
    repeats = task_repeats(task)
    _header(console, task, repeats)
    if not task.events:
        _render_messages(console, task, clip_, repeats)
        return
    if task.accounting is not None:
        _render_accounting(console, task.accounting)
    cut_replies = {c.call_id: c.accounting.llm_truncated for c in task.tool_calls
                   if c.accounting is not None and c.accounting.llm_truncated}
    t0 = task.events[0].t
    marks = (repeats.call_marks(task.tool_calls), repeats.turn_marks())
    for e in task.events:
        _render_event(console, e, f"+{e.t - t0:.3f}s", clip_, cut_replies, marks)


def _render_accounting(console: Console, acc: TaskAccounting) -> None:
    """Where the task's time and tokens went (`rollout.accounting`), two lines."""
    tools = ", ".join(f"{name} {s:.2f}" for name, s in sorted(acc.tool_s.items(), key=lambda kv: -kv[1]))
    time_line = f"time {acc.total_s:.2f} s: llm {acc.llm_s:.2f} · tools {acc.tool_total_s:.2f}"
    time_line += f" ({tools})" if tools else ""
    console.print(Text(f"{time_line} · waiting {acc.waiting_s:.2f}", style="dim"))
    tokens = " · ".join(f"{stage} {n}" for stage, n in acc.tokens.items() if n)
    console.print(Text(f"tokens: {tokens or 'none counted'}", style="dim"))


# --- live events (watch=true) -------------------------------------------------------------------


def _arg(value: Any, limit: int = 60) -> str:
    return repr(clip(value, limit)) if isinstance(value, str) else clip(compact_json(value), limit)


def call_gist(name: str, arguments: dict[str, Any] | str) -> str:
    """`dense('who founded X', top_k=5)`: the tool's short name, the query first, then the rest.

    A model's requested arguments can be text that is not a JSON object (an `LLMOutputEvent` keeps
    them as written): shown as they are."""
    if not isinstance(arguments, dict):
        return f"{name.removeprefix(TOOL_PREFIX)}({_arg(arguments)})"
    args = dict(arguments)
    parts = [_arg(args.pop("query"))] if "query" in args else []
    parts += [f"{k}={_arg(v, 30)}" for k, v in args.items()]
    return f"{name.removeprefix(TOOL_PREFIX)}({', '.join(parts)})"


def short_id(task_id: str, width: int = 12) -> str:
    """The tail of the id, where run-wide prefixes (`nq_dev_...`) stop and the numbers start."""
    return task_id if len(task_id) <= width else "…" + task_id[-(width - 1):]


def format_live_event(task_id: str, event: AnyEvent) -> Text:
    """One line for one event as the driver drains it: time, task, kind, gist.

    Called for every event of a watched run, so it only formats: no lookups, nothing that can raise
    on what a model or a tool wrote.
    """
    t = event.t
    line = Text(time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d} ", style="dim")
    line.append(f"{short_id(task_id):<12} ", style="bold")
    match event:
        case LLMOutputEvent():
            if event.tool_calls:
                gist = Text("calls " + ", ".join(call_gist(str(c.get("name")), c.get("arguments") or {})
                                                 for c in event.tool_calls))
            else:
                gist = Text(clip(" ".join((event.content or "").split()), 100))
            if event.latency_ms:
                gist.append(f" · {event.latency_ms:.0f} ms", style="dim")
            if stopped := finish_note(event.finish_reason):
                gist.append(f" {stopped}", style="yellow")
            return line + _kind("llm", "blue", gist)
        case LLMThinkingEvent():
            return line + _kind("think", "dim", Text(clip(" ".join(event.content.split()), 100), style="dim italic"))
        case ToolCallEvent():
            return line + _kind("call", "cyan", call_gist(event.name, event.arguments))
        case ToolResultEvent():
            gist = Text("→ ")
            gist.append(event.outcome, style="green" if event.ok else "bold red")
            if event.ok:
                gist.append(f" {len(event.result_ids)} hits")
            gist.append(f" {event.latency_ms:.0f} ms")
            if not event.ok:
                gist.append(" " + clip(" ".join(event.text.split()), 80), style="red")
            return line + _kind("result", "green" if event.ok else "red", gist)
        case CompletionEvent():
            return line + _kind("answer", "bold green", Text("answer: " + clip(event.prediction, 100), style="bold green"))
        case ErrorEvent():
            msg = f"{event.kind}: {clip(event.message, 120)}"
            return line + _kind("error", "bold red", Text(msg, style="bold red"))
    return line + Text(event.type, style="yellow")
