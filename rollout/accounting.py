"""Per-stage accounting: what each tool call put into the model's context, and where a task's time and tokens went.

A RAG pipeline has stages (retrieval, filtering, chunking, answer generation), and an agent pays for each:
in tokens the tool results add to its context, in tokens of the LLM calls a tool makes itself (a relevance
filter, a gateway-side answer), and in time. The gateway measures each call (`CallAccounting`, sent back in
the result's `_meta` and written to its ledger); `task_accounting` adds a task's calls and the agent's own
turns up (`TaskAccounting`, one per trajectory line).

Tokens are counted by one tokenizer, the gateway's (`tokenizer=`, by default the bundled encoder's), on the
exact text the agent receives, so a chunk budget and a context count mean the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rollout.codec import JsonRecord

if TYPE_CHECKING:
    from rollout.events import AnyEvent

Stage = Literal["retrieval", "filtering", "chunking", "generation", "other"]
"""The pipeline stage a tool serves; a tool group declares its own (`ToolRegistry.add(stage=...)`)."""
STAGES: tuple[Stage, ...] = ("retrieval", "filtering", "chunking", "generation", "other")
AGENT = "agent"
"""The token split's key for the agent's own turns (its LLM's prompt and completion tokens)."""


@dataclass(frozen=True, slots=True)
class CallAccounting:
    """What one tool call cost, as the gateway measured it (result `_meta["rollout/accounting"]`, ledger line)."""

    stage: str
    """Pipeline stage of the tool (`Stage`)."""
    context_tokens: int
    """Tokens of the result text the agent receives, by the gateway's tokenizer."""
    llm_prompt_tokens: int = 0
    """Prompt tokens of the LLM calls the tool made (filtering, answer generation); 0 for tools without any."""
    llm_completion_tokens: int = 0
    """Completion tokens of those LLM calls."""
    llm_ms: float = 0.0
    """Time the tool waited for those LLM calls."""
    llm_truncated: int = 0
    """Of those LLM calls, replies the endpoint cut at their token limit (finish_reason `length`): a relevance
    score or an answer the tool read from a cut reply."""

    @property
    def llm_tokens(self) -> int:
        return self.llm_prompt_tokens + self.llm_completion_tokens

    def to_json(self) -> dict[str, Any]:
        # Its fields as `asdict` gives them, read directly: the gateway stamps every call, and asdict's deep
        # copy would cost more than the dictionary itself.
        return {name: getattr(self, name) for name in _CALL_FIELDS}

    @classmethod
    def from_json(cls, data: Any) -> CallAccounting | None:
        """The accounting a result or record carries; None for anything else (results of older gateways)."""
        if not isinstance(data, Mapping) or "context_tokens" not in data:
            return None
        try:
            return cls(str(data.get("stage") or "other"), int(data["context_tokens"]),
                       int(data.get("llm_prompt_tokens") or 0), int(data.get("llm_completion_tokens") or 0),
                       float(data.get("llm_ms") or 0.0), int(data.get("llm_truncated") or 0))
        except (TypeError, ValueError):
            return None


class AccountedCall(Protocol):
    """What `task_accounting` reads of a tool call (`rollout.records.ToolCallRecord`)."""

    @property
    def name(self) -> str: ...
    @property
    def latency_ms(self) -> float: ...
    @property
    def accounting(self) -> CallAccounting | None: ...


_CALL_FIELDS = tuple(f.name for f in fields(CallAccounting))


@dataclass(frozen=True, slots=True)
class TaskAccounting:
    """Where one task's time and tokens went; `TaskResult.accounting`, a trajectory line's `accounting`."""

    total_s: float
    """The task's wall-clock time."""
    llm_s: float
    """Time the agent's own policy steps took (its LLM requests, retries included)."""
    tool_s: dict[str, float]
    """Per tool name, the summed round-trip time of its calls as the agent waited for them."""
    waiting_s: float
    """The rest of the wall-clock time: scheduling, the agent's own work, the environment; never below 0
    (parallel tool calls can overlap, so their sum may exceed the wall-clock time)."""
    context_tokens: dict[str, int]
    """Per stage, tokens the tool results put into the agent's context."""
    tool_llm_tokens: dict[str, int]
    """Per stage, prompt + completion tokens of LLM calls the tools made themselves."""
    agent_tokens: int
    """Prompt + completion tokens of the agent's own turns (0 for a policy without a language model). Its
    prompts re-read the context, so the context tokens are also inside this count. The endpoint's
    `total_tokens` when it reports one, else prompt + completion."""
    calls_counted: int = 0
    """Tool calls that reported accounting (calls refused before the gateway, or to older gateways, do not)."""

    @property
    def tool_total_s(self) -> float:
        return sum(self.tool_s.values())

    @property
    def tokens(self) -> dict[str, int]:
        """Tokens by stage: each stage's context and tool-LLM tokens, and the agent's own turns (`AGENT`)."""
        split = {stage: self.context_tokens.get(stage, 0) + self.tool_llm_tokens.get(stage, 0) for stage in STAGES}
        split[AGENT] = self.agent_tokens
        return split

    def to_json(self) -> dict[str, Any]:
        return {
            "time_s": {"total": self.total_s, "llm": self.llm_s, "tools": dict(self.tool_s), "waiting": self.waiting_s},
            "context_tokens": dict(self.context_tokens),
            "tool_llm_tokens": dict(self.tool_llm_tokens),
            "agent_tokens": self.agent_tokens,
            "tokens": self.tokens,
            "calls_counted": self.calls_counted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskAccounting:
        time_s = data["time_s"]
        return cls(
            total_s=float(time_s["total"]), llm_s=float(time_s["llm"]),
            tool_s={str(k): float(v) for k, v in (time_s.get("tools") or {}).items()},
            waiting_s=float(time_s["waiting"]),
            context_tokens={str(k): int(v) for k, v in (data.get("context_tokens") or {}).items()},
            tool_llm_tokens={str(k): int(v) for k, v in (data.get("tool_llm_tokens") or {}).items()},
            agent_tokens=int(data.get("agent_tokens") or 0), calls_counted=int(data.get("calls_counted") or 0),
        )


def task_accounting(
    calls: Sequence[AccountedCall], events: Iterable[AnyEvent], usage: Mapping[str, float], latency_s: float,
) -> TaskAccounting:
    """A task's accounting from what its record holds: tool calls (with the gateway's `accounting`), the
    agent's `llm_output` events (their `latency_ms`) and its token usage."""
    from rollout.events import LLMOutputEvent

    llm_s = sum(e.latency_ms for e in events if isinstance(e, LLMOutputEvent)) / 1000.0
    tool_s: dict[str, float] = {}
    context: dict[str, int] = {}
    tool_llm: dict[str, int] = {}
    counted = 0
    for call in calls:
        tool_s[call.name] = tool_s.get(call.name, 0.0) + call.latency_ms / 1000.0
        cost = call.accounting
        if cost is None:
            continue
        counted += 1
        context[cost.stage] = context.get(cost.stage, 0) + cost.context_tokens
        if cost.llm_tokens:
            tool_llm[cost.stage] = tool_llm.get(cost.stage, 0) + cost.llm_tokens
    agent_tokens = int(usage.get("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)))
    waiting = max(0.0, latency_s - llm_s - sum(tool_s.values()))
    # Rounded to the microsecond here, not when written, so a record reads back equal to itself.
    return TaskAccounting(_us(latency_s), _us(llm_s), {name: _us(s) for name, s in tool_s.items()}, _us(waiting),
                          context, tool_llm, agent_tokens, counted)


def _us(seconds: float) -> float:
    return round(seconds, 6)


@dataclass(frozen=True, slots=True)
class TimeSplit(JsonRecord):
    """Where a task's wall-clock time went, in seconds (`rollout.accounting.TaskAccounting`)."""

    total: float
    """Wall-clock time of the task."""
    llm: float
    """The agent's own LLM requests."""
    tools: float
    """Tool calls as the agent waited for them, summed over its tools."""
    waiting: float
    """The rest: scheduling, the agent's own work, the environment. Never below 0 per task, and parallel tool
    calls overlap, so llm + tools + waiting can exceed total."""


@dataclass(frozen=True, slots=True)
class ToolAccounting(JsonRecord):
    """What one tool's calls cost over a run's records, from the accounting each call carries."""

    stage: str | None
    """Pipeline stage its calls reported (the most frequent, should they differ); None when none reported one."""
    calls: int
    """Calls made."""
    calls_counted: int
    """Calls that reported accounting; the per-call token means are over these alone."""
    context_tokens_per_call: float | None
    """Mean tokens a counted call's result put into the agent's context (None without counted calls)."""
    llm_tokens_per_call: float | None
    """Mean prompt + completion tokens of the LLM calls the tool made itself, per counted call."""
    latency_ms_per_call: float | None
    """Mean round trip the agent waited for, over every call (None without calls)."""


@dataclass(frozen=True, slots=True)
class RunAccounting:
    """Where a run's tasks spent their time and tokens: means per task over every record summarised (scored or
    not: a failed task cost its time and tokens too), and per tool (`rollout.report.costs`)."""

    tasks: int
    """Records summarised, the denominator of every per-task mean."""
    rebuilt: int
    """Of them, records written before tasks carried accounting, whose accounting was rebuilt from their tool
    calls, events, usage and latency (their calls report no tokens unless the gateway stamped them)."""
    calls: int
    """Tool calls of those records."""
    calls_counted: int
    """Of them, calls that reported accounting; a call that did not adds 0 context tokens to its task."""
    time_s: TimeSplit
    """Mean seconds per task: total, the agent's LLM, tools, waiting."""
    tool_time_s: dict[str, float]
    """Mean seconds per task spent in each tool's calls, by tool name (sorted); they add up to `time_s.tools`
    (up to rounding)."""
    context_tokens: float
    """Mean tokens per task the tool results put into the agent's context (summed over stages)."""
    tool_llm_tokens: float
    """Mean prompt + completion tokens per task of the LLM calls tools made themselves."""
    tokens: dict[str, float]
    """Mean tokens per task by stage (`rollout.accounting.STAGES`, then any other stage met): context and tool
    LLM tokens of the stage, and `agent`, the agent's own LLM turns (whose prompts re-read the context)."""
    tools: dict[str, ToolAccounting]
    """Per tool name, sorted by name."""

    @property
    def agent_tokens(self) -> float:
        return self.tokens.get("agent", 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks, "rebuilt": self.rebuilt, "calls": self.calls, "calls_counted": self.calls_counted,
            "time_s": self.time_s.to_json(), "tool_time_s": dict(self.tool_time_s),
            "context_tokens": self.context_tokens, "tool_llm_tokens": self.tool_llm_tokens,
            "tokens": dict(self.tokens), "tools": {name: t.to_json() for name, t in self.tools.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunAccounting:
        return cls(
            tasks=int(data["tasks"]), rebuilt=int(data.get("rebuilt", 0)), calls=int(data["calls"]),
            calls_counted=int(data["calls_counted"]), time_s=TimeSplit.from_json(data["time_s"]),
            tool_time_s={str(k): float(v) for k, v in data["tool_time_s"].items()},
            context_tokens=float(data["context_tokens"]), tool_llm_tokens=float(data["tool_llm_tokens"]),
            tokens={str(k): float(v) for k, v in data["tokens"].items()},
            tools={str(k): ToolAccounting.from_json(t) for k, t in data["tools"].items()},
        )
