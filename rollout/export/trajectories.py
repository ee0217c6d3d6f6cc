"""A run folder's tasks as training conversations: which tasks qualify, and what the model saw in each.

A task becomes one `Conversation`: its messages exactly as the agent kept them (the conversation it sent to
the model, in chat-completions form, ending with the model's answer) and the function specs the model was
shown. The specs come from the run's tools.json (`rollout.run_folder.RunTools`); with dynamic tool sets a task
saw only some of them, which its record names (`TaskResult.offered_tools`).

Agents that write their tool calls as text (`<search>…</search>` and `<information>…</information>` in plain
messages) were shown no function specs: their conversations carry no tools. They are told apart without their
code: rollout's function-calling agents by the `agent._target_` the run's config.yaml records, any other agent
by its messages (a tool call or a tool message means function calling).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import ExportError
from rollout.records import TaskResult
from rollout.report.scoring import score_task
from rollout.run_folder import RunTools, is_run_folder, iter_trajectory, read_config, read_tools

FUNCTION_CALLING_AGENTS = frozenset({
    "rollout.agents.openai_agent.OpenAIAgent",
    "rollout.agents.heuristic.HeuristicAgent",
    "rollout.agents.simulated.SimulatedAgent",
})
"""Agents that offer the environment's tools as function specs (the chat-completions `tools` field)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One task of a run as a training conversation, before a format shapes it into a row."""

    id: str
    """The question's id."""
    repeat: int
    """Which repeat of the question (0-based)."""
    messages: list[dict[str, Any]]
    """The conversation as the agent sent it to the model, its answer last; tool-call arguments as JSON text."""
    tools: list[dict[str, Any]] | None
    """The function specs the model was shown; None when it was shown none (a text agent, or a mode without tools)."""
    parallel_tool_calls: bool | None
    """The `parallel_tool_calls` the agent sent with its requests; None when it left the server's default."""
    exact_match: float
    """The task's exact match, as the run's summary scores it."""
    f1: float
    """The task's token F1, as the run's summary scores it."""


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which answered tasks to keep, by their score."""

    only_correct: bool = False
    """Keep only exact-match correct tasks."""
    min_f1: float | None = None
    """Keep only tasks with F1 at least this."""

    def refuses(self, exact_match: float, f1: float) -> str | None:
        """Why a task with these scores is left out, or None when it is kept."""
        if self.only_correct and exact_match < 1.0:
            return "not exact-match correct"
        if self.min_f1 is not None and f1 < self.min_f1:
            return f"F1 below {self.min_f1:g}"
        return None


def calls_functions(messages: list[dict[str, Any]]) -> bool:
    """A conversation with a function call or a tool message in it."""
    return any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


class RunConversations:
    """The qualifying tasks of one run folder, read one at a time; `skipped` counts the others by reason."""

    def __init__(self, run_dir: Path | str, keep: TaskFilter = TaskFilter()) -> None:
        self.run_dir = Path(run_dir)
        if not is_run_folder(self.run_dir):
            raise ExportError(f"{self.run_dir}: no trajectory.jsonl here; pass a run folder such as "
                              "results/<experiment>/<mode>")
        self.keep = keep
        self.tools: RunTools | None = read_tools(self.run_dir)
        agent = (read_config(self.run_dir) or {}).get("agent")
        agent = agent if isinstance(agent, dict) else {}
        self.agent_target: str | None = agent.get("_target_")
        parallel = agent.get("parallel_tool_calls")
        self.parallel_tool_calls: bool | None = parallel if isinstance(parallel, bool) else None
        self.skipped: Counter[str] = Counter()

    def __iter__(self) -> Iterator[Conversation]:
        for task in iter_trajectory(self.run_dir, keep=("messages",)):  # events, most of a line, are never read
            conversation = self._conversation(task)
            if conversation is not None:
                yield conversation

    def _conversation(self, task: TaskResult) -> Conversation | None:
        why = self._refusal(task)
        scores: dict[str, Any] = {}
        if why is None:
            scores = score_task(task)
            why = self.keep.refuses(scores["exact_match"], scores["f1"])
        tools: list[dict[str, Any]] | None = None
        if why is None and self._shows_specs(task):
            tools = self._specs_shown(task)
            if tools is None:  # a dynamic run's record kept before offered_tools was: what it saw is unknown
                why = "tools offered not recorded"
        if why is not None:
            self.skipped[why] += 1
            return None
        return Conversation(task.id, task.repeat, task.messages, tools or None,
                            self.parallel_tool_calls if tools else None, scores["exact_match"], scores["f1"])

    @staticmethod
    def _refusal(task: TaskResult) -> str | None:
        """Why a task cannot be a training conversation whatever its score, or None."""
        if task.status != "ok":  # its conversation was cut short, or the tools failed under it
            return task.status
        if not task.messages:
            return "no conversation recorded"
        if task.truncated:  # training on it would teach the model to stop mid-answer
            return "answer cut at the token limit"
        if task.out_of_context:  # the conversation ends where the server refused it, with no answer
            return "out of the model's context window"
        if task.unreadable_call:  # the model's last reply is lost: the server sent an error in its place
            return "tool call the server could not read"
        return None

    def _shows_specs(self, task: TaskResult) -> bool:
        """Whether the agent showed the model function specs (else its tools were tags in text)."""
        return self.agent_target in FUNCTION_CALLING_AGENTS or calls_functions(task.messages)

    def _specs_shown(self, task: TaskResult) -> list[dict[str, Any]] | None:
        """The specs this task showed the model, in the order the environment lists them; None when unknown."""
        if self.tools is None:
            raise ExportError(
                f"{self.run_dir} has no tools.json, so the tool specs the model was shown are unknown (runs made "
                "before it was written). Run the command that made this folder again: it resumes, runs no "
                "finished task again, and writes tools.json")
        if task.offered_tools is not None:
            try:
                return self.tools.named(task.offered_tools)
            except KeyError as e:
                raise ExportError(f"{self.run_dir}: task {task.id} (repeat {task.repeat}) was offered tools "
                                  f"tools.json does not list ({e.args[0]}); the folder mixes two runs") from None
        return None if self.tools.dynamic_toolsets else self.tools.specs
