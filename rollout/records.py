"""Typed record of one finished task: one line of trajectory.jsonl."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TaskStatus = Literal["ok", "error", "timeout", "infra_error"]
"""ok: the agent answered with the tools working. error: the task failed (see `error`). timeout: it hit
its time limit. infra_error: a tool call failed for infrastructure reasons (`rollout.wire.INFRA_OUTCOMES`:
gateway down or timed out, upstream unavailable), so any answer lacks the evidence it asked for."""


TaskKey = tuple[str, int]
"""(question id, repeat): what one trajectory record answers."""


def task_key(record: dict[str, Any]) -> TaskKey:
    """The key of a trajectory record read from disk (records before repeats existed are repeat 0)."""
    return str(record.get("id")), int(record.get("repeat") or 0)


def wire_task_id(question_id: str, repeat: int) -> str:
    """The task id a repeat's tool calls carry to the gateway: per-task gateway state (tool sets) must not
    be shared between two repeats of one question running at once. Repeat 0 keeps the question's id."""
    return question_id if repeat == 0 else f"{question_id}#{repeat}"


@dataclass(slots=True)
class TaskResult:
    """What happened on one task, scored later by `rollout.scoring`."""

    id: str
    """Task id from the question file."""
    question: str
    """The question as asked."""
    golden_answers: list[str]
    """Accepted answers (the agent never saw these)."""
    prediction: str
    """The agent's final answer ("" on error)."""
    tool_calls: list[dict[str, Any]]
    """`envs.ToolCallRecord` dicts: name, arguments, latency, ok, outcome, error, result ids."""
    turns: int
    """Policy steps taken."""
    error: str | None
    """Why the task failed, or None."""
    worker_id: str
    """Rollout worker that ran it."""
    latency_s: float
    """Wall-clock time of the task."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The question's metadata (gold_doc_ids, hops, style, ...)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation in chat-completions form."""
    status: TaskStatus = "ok"
    """See `TaskStatus`; only `ok` tasks are scored by default."""
    usage: dict[str, float] = field(default_factory=dict)
    """Token usage of the task (prompt_tokens, completion_tokens, total_tokens, cost_usd when priced)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """`rollout.events` of the task in order (llm_output, tool_call, tool_result, completion, error)."""
    attempts: int = 1
    """How many times the task was started (more than 1 when a worker died under it); the gateway's
    ledger records this attempt number with each of its calls."""
    repeat: int = 0
    """Which of the run's `repeats` runs of this question this is (0-based)."""
    seed: int | None = None
    """Seed handed to the agent for this repeat (sampling agents use it; None before seeds existed)."""

    @property
    def key(self) -> TaskKey:
        return self.id, self.repeat

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
