"""Gateway-side accounting of every tool call: its stage, the tokens its result puts into the model's context,
and the LLM calls the tool made itself (`rollout.accounting.CallAccounting`).

Installed as an `mcp` server extension around `tools/call`, outside the gateway's timeout, so every answer,
an error or a timeout included, leaves with `_meta["rollout/accounting"]`; the stats middleware (outside all
extensions) copies it into the ledger. The context tokens are counted on `rollout.wire.result_text`, the exact
text a client makes of the result (also when the gateway sends only the structured content).

A tool that calls an LLM reports each call with `record_llm_call`, its finish_reason included, so the accounting
counts the replies cut at their token limit (`llm_truncated`); the tool may run on a worker thread, which sees
the same list through the copied context.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp_types import CallToolRequestParams

from rollout.accounting import CallAccounting
from rollout.events import CUT_AT_LIMIT
from rollout.llm.token_count import TokenCounter
from rollout.wire import META_ACCOUNTING, result_text


@dataclass(frozen=True, slots=True)
class LLMCall:
    """One LLM request a tool made."""

    prompt_tokens: int
    completion_tokens: int
    ms: float
    finish_reason: str | None = None
    """As the endpoint sent it; `length` is a reply cut at its token limit. None when absent or the call failed."""


_LLM_CALLS: ContextVar[list[LLMCall] | None] = ContextVar("rollout_tool_llm_calls", default=None)


def record_llm_call(prompt_tokens: int, completion_tokens: int, ms: float, finish_reason: str | None = None) -> None:
    """Count an LLM request against the tool call being served (nothing outside a served call)."""
    calls = _LLM_CALLS.get()
    if calls is not None:
        calls.append(LLMCall(int(prompt_tokens), int(completion_tokens), float(ms), finish_reason))


@contextmanager
def timed_llm_call() -> Iterator[dict[str, Any]]:
    """`with timed_llm_call() as reply: ...; reply.update(prompt_tokens=..., completion_tokens=..., finish_reason=...)`
    records the request with its time, also when it fails (its tokens then are whatever was set)."""
    reply: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        yield reply
    finally:
        record_llm_call(reply.get("prompt_tokens", 0), reply.get("completion_tokens", 0),
                        (time.perf_counter() - t0) * 1000.0, reply.get("finish_reason"))


class CallAccountant(Extension):
    """Stamp each tools/call result with its `CallAccounting`."""

    identifier = "dev.rollout/accounting"

    def __init__(self, counter: TokenCounter, stages: Mapping[str, str]) -> None:
        self.counter = counter
        self.stages = dict(stages)
        """Tool name → stage; a tool not named (a proxied upstream tool) is `other`."""

    def settings(self) -> dict[str, Any]:
        return {"tokenizer": self.counter.name}

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        calls: list[LLMCall] = []
        reset = _LLM_CALLS.set(calls)
        try:
            result = await call_next(ctx)
        finally:
            _LLM_CALLS.reset(reset)
        cost = CallAccounting(
            stage=self.stages.get(params.name, "other"),
            context_tokens=self.counter.count(result_text(result)),
            llm_prompt_tokens=sum(c.prompt_tokens for c in calls),
            llm_completion_tokens=sum(c.completion_tokens for c in calls),
            llm_ms=round(sum(c.ms for c in calls), 3),
            llm_truncated=sum(c.finish_reason == CUT_AT_LIMIT for c in calls),
        )
        return stamp(result, cost)


def stamp(result: Any, cost: CallAccounting) -> Any:
    """`result` (a model or a wire dict) with `cost` in its `_meta`."""
    if isinstance(result, dict):
        result["_meta"] = {**(result.get("_meta") or {}), META_ACCOUNTING: cost.to_json()}
    elif hasattr(result, "meta"):
        result.meta = {**(result.meta or {}), META_ACCOUNTING: cost.to_json()}
    return result
