"""Why a run's conversations outgrew the model's context window: the tools' results, or the model's own output.

A conversation grows by what the tools return and by what the model writes. Fewer turns or passages (`agent.max_turns`,
`agent.top_k`) shorten the first; they do nothing for a model that writes until its window is full (a small model
rambling, `llm.sampling.max_tokens` unset or past the room left), whose fix is the reply's token limit. A task that
ended out of context (`TaskResult.out_of_context`) overflowed by the model's own output when

- one of its replies was cut at its limit (finish_reason `length`) after at least `RUNAWAY_SHARE` of the window the
  server's refusal names: the reply itself filled the context;
- the refusal says the completion's budget took at least as much of the request as the prompt (vLLM's
  "N in the messages, M in the completion", TGI's, and `llm.context_window`'s own check say so);
- or the model's replies (its messages' text and tool-call arguments) add up to more characters than the tools'
  results and the feedback sent back (tool messages, and user messages after the question).

The summary's warning then names `llm.sampling.max_tokens`; otherwise the fix for long conversations
(`rollout.llm.context_window.FIX`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rollout.events import CUT_AT_LIMIT, LLMOutputEvent
from rollout.llm.context_window import FIX, OWN_OUTPUT_FIX, budget_in, window_in
from rollout.records import TaskResult

RUNAWAY_SHARE = 0.5
"""A reply cut at its limit after this share of the context window filled the window itself."""


def own_output_overflow(task: TaskResult) -> bool:
    """Whether the task's conversation outgrew the window by the model's own output (see the module docstring)."""
    window = window_in(task.stop_message)
    if window is not None:
        for event in task.events:
            if isinstance(event, LLMOutputEvent) and event.finish_reason == CUT_AT_LIMIT:
                if ((event.usage or {}).get("completion_tokens") or 0) >= RUNAWAY_SHARE * window:
                    return True
    budget = budget_in(task.stop_message)
    if budget is not None and budget[1] >= budget[0]:
        return True
    written, returned = _growth(task.messages)
    return written > returned


def _growth(messages: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Characters the conversation grew by through the model's replies, and through what was sent back to it."""
    written = returned = 0
    asked = False
    for m in messages:
        text = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content") or "")
        role = m.get("role")
        if role == "assistant":
            written += len(text) + sum(len(str((c.get("function") or {}).get("arguments") or ""))
                                       for c in m.get("tool_calls") or [])
        elif role == "tool" or (role == "user" and asked):
            returned += len(text)
        asked = asked or role == "user"
    return written, returned


@dataclass(slots=True)
class ContextOverflowTally:
    """The run's tasks that ended out of context, and how many of them by the model's own output."""

    tasks: int = 0
    own_output: int = 0
    message: str | None = None
    """The first such task's refusal, as the server sent it."""

    def add(self, task: TaskResult) -> None:
        if not task.out_of_context:
            return
        self.tasks += 1
        self.own_output += own_output_overflow(task)
        if self.message is None:
            self.message = task.stop_message

    def warning(self, n: int) -> str | None:
        """The summary's line (of `n` tasks) naming the fix for what filled the context; None when nothing did."""
        if not self.tasks:
            return None
        said = f" (the server said: {self.message!r})" if self.message else ""
        head = (f"{self.tasks} of {n} tasks ran out of the model's context window and are scored as the answer they "
                f"had{said}")
        if self.own_output == self.tasks:
            return (f"{head}: the model's own output filled it, not the tools' results (fewer turns or passages "
                    f"would not help): {OWN_OUTPUT_FIX}")
        if self.own_output:
            return (f"{head}: in {self.own_output} of them the model's own output filled it: {OWN_OUTPUT_FIX}; "
                    f"in the others: {FIX}")
        return f"{head}: {FIX}"
