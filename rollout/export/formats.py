"""The training-row formats: how a conversation or a question becomes the row a trainer reads.

- `openai`: OpenAI's fine-tuning file for chat models with tools: `{"messages", "tools", "parallel_tool_calls"}`
  and nothing else, as its format has no other key. Tool-call arguments are JSON text, as the API sends them.
- `trl`: TRL's conversational language-modeling type with tool calling (SFTTrainer): `messages` and `tools`,
  tool-call arguments as JSON objects (TRL's tool-calling example); plus the columns `id`, `repeat`,
  `exact_match` and `f1`, which SFTTrainer leaves alone.
- `verl-sft`: verl's multi-turn SFT dataset (`MultiTurnSFTDataset`, `data.multiturn.messages_key=messages`,
  `tools_key=tools`): `messages`, `tools`, arguments as JSON text (as verl's own datasets hold them), and
  `extra_info` {id, repeat, exact_match, f1}, which it leaves alone.
- `verl-rl`: verl's RL prompt rows, as Search-R1's data scripts write them: `data_source`, `prompt` (the
  opening chat messages), `ability`, `reward_model` {style: rule, ground_truth: {target: gold answers}} and
  `extra_info` {index, split, id, question, gold_doc_ids}.
- `browsecomp-plus`: not rows but a folder of BrowseComp-Plus run files, one per query, for its evaluator
  (`rollout.export.browsecomp_run`).

A conversation without tools (a text agent's, or a mode without tools) has no `tools` in a JSONL row and a
null one in parquet.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollout.export.trajectories import Conversation

SFT_FORMATS = ("openai", "trl", "verl-sft")
"""Formats of a run's conversations."""
RL_FORMATS = ("verl-rl",)
"""Formats of a question set's prompts."""
RUN_FORMATS = ("browsecomp-plus",)
"""Formats of a whole run for another benchmark's evaluator: a folder of files (`rollout.export.browsecomp_run`)."""
FORMATS = (*SFT_FORMATS, *RL_FORMATS, *RUN_FORMATS)

ABILITY = "fact-reasoning"
"""verl's `ability` of a question-answering prompt, as Search-R1 labels its NQ and HotpotQA rows."""


def openai_row(c: Conversation) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": c.messages}
    if c.tools is not None:
        row["tools"] = c.tools
        if c.parallel_tool_calls is not None:
            row["parallel_tool_calls"] = c.parallel_tool_calls
    return row


def trl_row(c: Conversation) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": arguments_as_objects(c.messages)}
    if c.tools is not None:
        row["tools"] = c.tools
    return {**row, "id": c.id, "repeat": c.repeat, "exact_match": c.exact_match, "f1": c.f1}


def verl_sft_row(c: Conversation) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": c.messages}
    if c.tools is not None:
        row["tools"] = c.tools
    row["extra_info"] = {"id": c.id, "repeat": c.repeat, "exact_match": c.exact_match, "f1": c.f1}
    return row


SFT_ROWS: dict[str, Callable[[Conversation], dict[str, Any]]] = {
    "openai": openai_row, "trl": trl_row, "verl-sft": verl_sft_row,
}


def arguments_as_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each tool call's JSON-text arguments parsed into an object. Arguments that are not a
    JSON object (a model that wrote broken JSON, which the agent answered with an error) stay the text the model
    wrote: that is the conversation it saw."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_with_object_arguments(c) for c in calls]}
        out.append(message)
    return out


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        return call
    # A string is what the model wrote of a call that could not be read, as the agent's history keeps it.
    if not isinstance(arguments, (dict, str)):
        return call
    return {**call, "function": {**function, "arguments": arguments}}


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One question as a verl RL prompt row."""

    data_source: str
    """Names the dataset; verl picks the reward function by it."""
    prompt: list[dict[str, str]]
    """The opening chat messages, as the configured agent sends them."""
    golden_answers: list[str]
    """The reward's ground truth (`reward_model.ground_truth.target`)."""
    index: int
    """Position in the question set (0-based)."""
    split: str
    """`dataset.questions.split`."""
    id: str
    """The question's id."""
    question: str
    """The question as asked."""
    gold_doc_ids: list[str] = field(default_factory=list)
    """Ids of the passages that hold the answer, when the question set has them."""

    def to_json(self) -> dict[str, Any]:
        return {
            "data_source": self.data_source,
            "prompt": self.prompt,
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": {"target": list(self.golden_answers)}},
            "extra_info": {"index": self.index, "split": self.split, "id": self.id, "question": self.question,
                           "gold_doc_ids": list(self.gold_doc_ids)},
        }
