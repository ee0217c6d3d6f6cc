"""Whether the tools' results reached the model: the prompt's growth after tool calls against what the tools returned.

A server whose chat template has no case for `role: tool` messages renders them empty (llama-cpp-python 0.3.36's
`--chat_format chatml-function-calling` does): the model never sees a passage, every arm of a retrieval comparison is
closed-book, and nothing else in a run says so. The endpoint reports each request's `prompt_tokens`; between two LLM
steps of a task the prompt grows by the model's own reply and by the tool results sent back. Over a run, when the
requests that followed tool calls grew by less than `REACHED_SHARE` of the tokens those tools returned (counted by
the gateway's tokenizer, which differs from a model's by tens of percent, not by a factor of four), the tool results
did not reach the model, and the summary says so. An agent that sends the results inside its next prompt as text (the
tagged agents) grows by about what they returned, and is not flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout.events import LLMOutputEvent, ToolResultEvent
from rollout.records import TaskResult

REACHED_SHARE = 0.25
"""The least share of the tools' tokens the prompts must grow by for the results to count as seen."""
MIN_TOOL_TOKENS = 200
"""Below this many tokens of tool results over the run there is too little to tell."""


@dataclass(slots=True)
class ToolReachTally:
    """Tool tokens returned between LLM steps, and the prompt's growth across those steps, summed over a run."""

    tool_tokens: int = 0
    growth: int = 0
    steps: int = 0
    """LLM requests that followed successful tool calls and had both requests' token counts."""

    def add(self, task: TaskResult) -> None:
        """Count one task's steps (from its events: kept when the summary reads the trajectory)."""
        returned = {c.call_id: c.accounting.context_tokens for c in task.tool_calls if c.accounting is not None}
        previous: tuple[int, int] | None = None
        pending = 0
        for event in task.events:
            if isinstance(event, ToolResultEvent) and event.ok:
                pending += returned.get(event.call_id, 0)
            elif isinstance(event, LLMOutputEvent):
                usage = event.usage or {}
                prompt = usage.get("prompt_tokens")
                if not prompt:  # an endpoint that reports no usage: nothing to compare
                    previous, pending = None, 0
                    continue
                if previous is not None and pending:
                    self.tool_tokens += pending
                    self.growth += max(0, prompt - previous[0] - previous[1])
                    self.steps += 1
                previous, pending = (prompt, usage.get("completion_tokens") or 0), 0

    def warning(self) -> str | None:
        """The summary's line when the tool results did not reach the model, naming the fix; None otherwise."""
        if not self.steps or self.tool_tokens < MIN_TOOL_TOKENS or self.growth >= REACHED_SHARE * self.tool_tokens:
            return None
        return (f"the tool results seem not to reach the model: over {self.steps} LLM requests that followed tool "
                f"calls, the prompt grew by {self.growth:,} tokens while the tools returned {self.tool_tokens:,} "
                "(by the gateway's tokenizer), so the answers are closed-book. The server's chat template may render "
                "`role: tool` messages empty (llama-cpp-python's --chat_format chatml-function-calling does): serve "
                "the model with llama.cpp's `llama-server --jinja` or a template that renders tool messages, and read "
                "one task's conversation with `rollout view RUN --task ID`")
