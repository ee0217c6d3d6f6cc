"""Typed events of one task's agent loop: what the policy said, which tools it called, how it ended.

Every event carries the Unix time it happened (`t`). A task's events are stored, in order, in its
trajectory line (`TaskResult.events`), replayed by `python -m rollout.view`, and streamed live to
the driver when a run is started with `watch=true`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, get_args

ErrorKind = Literal["error", "timeout", "cancelled"]
CUT_AT_LIMIT = "length"
"""The `finish_reason` of a chat completion the endpoint cut at its token limit (`max_tokens`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all events; `type` names the kind in JSON."""

    type: ClassVar[str] = "event"
    t: float = field(default_factory=time.time)
    """Unix time the event happened."""

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMOutputEvent(Event):
    """One policy step's output: text and/or the tool calls it asks for."""

    type: ClassVar[str] = "llm_output"
    turn: int
    """1-based policy step."""
    content: str | None = None
    """Text the model wrote (None when it only called tools)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Requested calls: [{"id", "name", "arguments"}]."""
    usage: dict[str, int] | None = None
    """Token usage of this step as the endpoint reported it (prompt_tokens, completion_tokens, total_tokens)."""
    latency_ms: float = 0.0
    """Time the policy took to produce this output (the LLM request, retries included)."""
    finish_reason: str | None = None
    """Why the endpoint stopped, as it sent it: `stop`, `length` (cut at the token limit, `CUT_AT_LIMIT`),
    `tool_calls`, `content_filter`...; None when it sent none, or for a policy without an endpoint."""
    sent: float | None = None
    """Unix time the request's answered attempt was sent; None for a policy without an endpoint (and on lines
    written before it was kept). With `request_ms` it is the interval `rollout.report.endpoint` measures the
    endpoint's concurrency from."""
    request_ms: float | None = None
    """Wall time of the answered attempt alone (`latency_ms` adds failed attempts and the waits between)."""
    server_ms: float | None = None
    """Time the server says it spent on the request (llama.cpp's `timings`); None when it does not say."""

    @property
    def cut(self) -> bool:
        """Whether the endpoint cut this output at its token limit (`max_tokens`)."""
        return self.finish_reason == CUT_AT_LIMIT


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMThinkingEvent(Event):
    """Reasoning text a model returned beside its answer (e.g. `reasoning_content`)."""

    type: ClassVar[str] = "llm_thinking"
    turn: int
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent(Event):
    """A tool call leaving for the gateway."""

    type: ClassVar[str] = "tool_call"
    call_id: str
    """Same id as the trajectory's tool call record and the gateway's stats line."""
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent(Event):
    """A tool call's result as the agent received it."""

    type: ClassVar[str] = "tool_result"
    call_id: str
    name: str
    ok: bool
    outcome: str
    """`rollout.wire.Outcome`: ok, tool_error, invalid_arguments, unknown_tool, timeout, transport_error."""
    text: str
    """The result text the agent saw, whole (the error message when not ok): what `rollout view --full` and the
    web viewer's task page show. Records written before it was kept whole hold its first 2,000 characters."""
    latency_ms: float
    result_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionEvent(Event):
    """The task finished with an answer."""

    type: ClassVar[str] = "completion"
    prediction: str
    turns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Event):
    """The task ended without an answer: an error, its time limit, or the run being stopped."""

    type: ClassVar[str] = "error"
    kind: ErrorKind
    message: str


AnyEvent = LLMOutputEvent | LLMThinkingEvent | ToolCallEvent | ToolResultEvent | CompletionEvent | ErrorEvent
"""Every concrete event, discriminated by its `type` in JSON: what `TaskResult.events` holds. Code that
reads events matches on the class; `event_from_json` picks the class by `type`."""

EVENT_TYPES: dict[str, type[AnyEvent]] = {cls.type: cls for cls in get_args(AnyEvent)}


def event_from_json(data: Mapping[str, Any]) -> AnyEvent:
    """The typed event of a stored dict; an unknown `type` raises ValueError naming the known ones, a
    missing or unknown field TypeError."""
    if not isinstance(data, Mapping):
        raise TypeError(f"an event is a JSON object, not {type(data).__name__}")
    kind = data.get("type")
    cls = EVENT_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}; known: {', '.join(sorted(EVENT_TYPES))}")
    return cls(**{k: v for k, v in data.items() if k != "type"})


def answer_cut(events: Iterable[AnyEvent]) -> bool:
    """Whether the reply that gave a task's answer was cut at the token limit: the last `llm_output` asked for
    no tool and has finish_reason `length`. False for a policy without an endpoint (no finish_reason)."""
    last = None
    for e in events:
        if isinstance(e, LLMOutputEvent):
            last = e
    return last is not None and not last.tool_calls and last.cut


Listener = Callable[[str, AnyEvent], None]
"""Called with (task_id, event) as each event is emitted (live watching)."""


TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
"""The usage counts summed per task (an endpoint may report more, e.g. nested details)."""


class EventLog:
    """The events of one task, in order; an optional listener sees each as it is emitted."""

    def __init__(self, task_id: str, listener: Listener | None = None) -> None:
        self.task_id = task_id
        self.events: list[AnyEvent] = []
        self._listener = listener

    def emit(self, event: AnyEvent) -> None:
        self.events.append(event)
        if self._listener is not None:
            self._listener(self.task_id, event)

    def usage(self) -> dict[str, float]:
        """Tokens of the LLM outputs so far, summed; empty (not zero) when the endpoint reported none."""
        total: dict[str, float] = {}
        for e in self.events:
            if isinstance(e, LLMOutputEvent) and e.usage:
                for key in TOKEN_KEYS:
                    total[key] = total.get(key, 0) + e.usage.get(key, 0)
        return total
