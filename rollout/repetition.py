"""Repeated searches: tool calls that repeat an earlier call of their task, and turns that repeat the turn before.

A small model sampled greedily often asks the same thing again: it searches, reads the results, and writes its previous
turn word for word until it runs out of turns. This module counts that, per task and per run, from what the trajectory
records: a task's tool calls (`TaskResult.tool_calls`, in the order they were made) and its policy steps
(`LLMOutputEvent`s: each step's text and the calls it asked for). The evaluation summary (`repeated_calls`), the tool
report (`rollout.report.tool_calls.report`), `report compare` and the viewer all count with the rules below.

Definitions
- Normalised arguments: the arguments as JSON with their keys sorted, every string in them case-folded with its
  whitespace collapsed (runs of whitespace become one space, the ends are stripped), a whole float written as the
  integer (5.0 as 5); lists keep their order. Arguments a model wrote that are not a JSON object (an `LLMOutputEvent`
  keeps them as written) are one such string.
- A call repeats an earlier one when the same task (question and repeat) already called the same tool with the same
  normalised arguments, whatever came back. Every argument counts: `top_k` 5 then 10 of one query are two calls,
  since the second returns what the first did not (`rollout.report.tool_calls.report`' `repeated_query_share` looks at the
  `query` alone, and counts those).
- A turn is one policy step: the text of its `LLMOutputEvent`s and the calls they asked for (each call's tool and
  normalised arguments; their ids differ every time and are left out; reasoning, `LLMThinkingEvent`, is left out).
  A turn repeats when it equals the task's previous turn, text normalised as strings are above.
- A task loops when it has a repeated call or a repeated turn. When more than `LOOPING_SHARE` of a run's tasks loop,
  and its agent samples (an LLM's, not a deterministic stand-in's), the summary warns, naming what to try.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rollout.events import AnyEvent, LLMOutputEvent
from rollout.records import TaskResult, ToolCallRecord

LOOPING_SHARE = 0.5
"""The summary warns when more than this share of a run's tasks loop."""


def normalise_text(text: Any) -> str:
    """A string as compared for repeats: case-folded, whitespace collapsed; "" for None."""
    return " ".join(str(text or "").casefold().split())


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return normalise_text(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalised(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalised(v) for v in value]
    return value


def arguments_key(arguments: Any) -> str:
    """A call's arguments normalised (see the module docstring), as one string to compare."""
    return json.dumps(_normalised(arguments), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def repeats_of(calls: Sequence[tuple[str, Any]]) -> dict[int, int]:
    """For each (tool, arguments) of a task's calls, in order, that repeats an earlier one: its index → the index of
    the first call it repeats (0-based)."""
    first: dict[tuple[str, str], int] = {}
    repeats: dict[int, int] = {}
    for i, (name, arguments) in enumerate(calls):
        key = (str(name), arguments_key(arguments))
        if key in first:
            repeats[i] = first[key]
        else:
            first[key] = i
    return repeats


def turns_of(events: Iterable[AnyEvent]) -> list[tuple[int, tuple[str, tuple[tuple[str, str], ...]]]]:
    """Each policy step of a task, in order: (its turn number, (its normalised text, its calls)). Consecutive outputs
    of one turn number are one turn."""
    turns: list[tuple[int, list[str], list[tuple[str, str]]]] = []
    for e in events:
        if not isinstance(e, LLMOutputEvent):
            continue
        if not turns or turns[-1][0] != e.turn:
            turns.append((e.turn, [], []))
        turns[-1][1].append(normalise_text(e.content))
        turns[-1][2].extend((str(c.get("name")), arguments_key(c.get("arguments"))) for c in e.tool_calls)
    return [(turn, (" ".join(t for t in texts if t), tuple(calls))) for turn, texts, calls in turns]


@dataclass(frozen=True, slots=True)
class TaskRepeats:
    """One task's repeats."""

    calls: int
    """Tool calls of the task."""
    repeats_of: dict[int, int]
    """Index of each call that repeats an earlier one → the index of the first it repeats (0-based)."""
    turns: int
    """Policy steps recorded in its events (0 for records without events)."""
    repeated_turns: tuple[int, ...]
    """Turn numbers of the steps equal to the step before."""

    @property
    def loops(self) -> bool:
        return bool(self.repeats_of or self.repeated_turns)

    def call_marks(self, calls: Sequence[ToolCallRecord]) -> dict[str, str]:
        """Call id → "repeats call N" (N 1-based, as the viewer numbers a task's calls), for the repeated calls."""
        return {calls[i].call_id: f"repeats call {j + 1}" for i, j in self.repeats_of.items() if calls[i].call_id}

    def turn_marks(self) -> dict[int, str]:
        """Turn number → "same as turn N-1", for the repeated turns."""
        return {turn: f"same as turn {turn - 1}" for turn in self.repeated_turns}


def task_repeats(task: TaskResult) -> TaskRepeats:
    """The repeated calls and turns of one task (its events are needed for the turns: without them it has none)."""
    turns = turns_of(task.events)
    repeated = tuple(turns[k][0] for k in range(1, len(turns)) if turns[k][1] == turns[k - 1][1])
    calls = [(c.name, c.arguments) for c in task.tool_calls]
    return TaskRepeats(calls=len(calls), repeats_of=repeats_of(calls), turns=len(turns), repeated_turns=repeated)


@dataclass(slots=True)
class Repetition:
    """Repeated calls and turns over a run's records, added up record by record (`add`; nothing kept per record):
    evaluation_summary.json's `repeated_calls`."""

    tasks: int = 0
    """Records counted: every one summarised, scored or not."""
    calls: int = 0
    """Their tool calls."""
    count: int = 0
    """Calls that repeat an earlier call of their task."""
    tasks_with_repeated_calls: int = 0
    turns: int = 0
    """Policy steps recorded in their events."""
    repeated_turns: int = 0
    """Steps equal to the step before in their task."""
    tasks_with_repeated_turns: int = 0
    looping_tasks: int = 0
    """Tasks with a repeated call or a repeated turn."""

    def add(self, task: TaskResult) -> TaskRepeats:
        """Count one record's repeats in; they are returned."""
        repeats = task_repeats(task)
        self.tasks += 1
        self.calls += repeats.calls
        self.count += len(repeats.repeats_of)
        self.tasks_with_repeated_calls += bool(repeats.repeats_of)
        self.turns += repeats.turns
        self.repeated_turns += len(repeats.repeated_turns)
        self.tasks_with_repeated_turns += bool(repeats.repeated_turns)
        self.looping_tasks += repeats.loops
        return repeats

    @property
    def share(self) -> float | None:
        """Repeated calls of all calls; None without calls."""
        return round(self.count / self.calls, 4) if self.calls else None

    @property
    def looping_share(self) -> float | None:
        return round(self.looping_tasks / self.tasks, 4) if self.tasks else None

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "share": self.share, "calls": self.calls,
                "tasks_with_repeated_calls": self.tasks_with_repeated_calls, "repeated_turns": self.repeated_turns,
                "turns": self.turns, "tasks_with_repeated_turns": self.tasks_with_repeated_turns,
                "looping_tasks": self.looping_tasks, "looping_share": self.looping_share, "tasks": self.tasks}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Repetition | None:
        """The summary's block; None for files written before it was counted."""
        if data is None:
            return None
        return cls(**{f.name: int(data[f.name]) for f in fields(cls)})

    def warning(self, deterministic_agent: bool | None = None) -> str | None:
        """The summary's line when most tasks loop, with what to try; None otherwise, and for a deterministic agent
        (a stand-in that repeats by design: sampling settings would change nothing)."""
        if deterministic_agent or not self.tasks or self.looping_tasks <= LOOPING_SHARE * self.tasks:
            return None
        return (f"{self.looping_tasks} of {self.tasks} tasks ({self.looping_tasks / self.tasks:.0%}) repeat "
                f"themselves: {self.count} of {self.calls} tool calls repeat an earlier call of their task (same "
                f"tool, same arguments) and {self.repeated_turns} turns are the same as the turn before, so these "
                "tasks spend their turns asking again for what they were already given. A model sampled greedily "
                "often loops so: sample with a temperature (llm.sampling.temperature=0.7), add a repetition penalty "
                "(+llm.sampling.repetition_penalty=1.1 on vLLM or SGLang, +llm.sampling.repeat_penalty=1.1 on "
                "llama.cpp, +llm.sampling.frequency_penalty=0.5 on other OpenAI-compatible servers), or give it fewer "
                "turns (agent.max_turns); read one with `rollout view RUN --task ID`, which marks the repeats")
