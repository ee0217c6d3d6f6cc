"""An answer given between tags (`<answer> Kelmor </answer>`): how a policy is asked for it and how it is read.

verl scores a policy's decoded response by the content of its last complete answer tag
(`rollout.trainers.reward.compute_score`, 0 without one). `agent=openai agent.answer_tag=answer` reads an evaluated
answer the same way, with the same function (`last_answer`), and asks for it with the same sentence that
`rollout export --questions agent=openai agent.answer_tag=answer` puts in the training prompts
(`system_prompt_with_answer_tag`): the policy is asked and scored alike in training and in evaluation.
"""

from __future__ import annotations

import re
from typing import Any

from rollout.errors import ConfigError

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
ANSWER_INSTRUCTION = "Give your final answer inside {open} and {close}."
"""The sentence `agent.answer_tag` adds to the system prompt, with the tag's two strings."""
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def last_answer(text: str, open_tag: str = ANSWER_OPEN, close_tag: str = ANSWER_CLOSE) -> str | None:
    """The content of the last complete answer tag in `text` (stripped); None when there is none."""
    end = text.rfind(close_tag)
    while end != -1:
        start = text.rfind(open_tag, 0, end)
        if start != -1:
            return text[start + len(open_tag):end].strip()
        end = text.rfind(close_tag, 0, end)
    return None


def check_answer_tag(value: Any) -> str | None:
    """`agent.answer_tag` checked: None, or a tag name (`answer` stands for `<answer>` … `</answer>`)."""
    if value is None or (isinstance(value, str) and _TAG_NAME.fullmatch(value)):
        return value
    raise ConfigError(f"agent.answer_tag={value!r} must be a tag name such as answer (the prediction is then the "
                      "content of the last <answer>…</answer> of the final message), or null")


def tag_strings(answer_tag: str) -> tuple[str, str]:
    """The opening and closing strings of a tag name: `answer` → (`<answer>`, `</answer>`)."""
    return f"<{answer_tag}>", f"</{answer_tag}>"


def system_prompt_with_answer_tag(system_prompt: str, answer_tag: str | None) -> str:
    """The system prompt an agent asking for `answer_tag` sends: `system_prompt`, a blank line and
    `ANSWER_INSTRUCTION`; `system_prompt` as it is without a tag. The evaluated agent's prompt and the exported
    training prompt are both this text."""
    if check_answer_tag(answer_tag) is None:
        return system_prompt
    open_tag, close_tag = tag_strings(answer_tag)
    return f"{system_prompt}\n\n{ANSWER_INSTRUCTION.format(open=open_tag, close=close_tag)}"


def refuse_answer_tag(answer_tag: Any, agent: str, why: str) -> None:
    """Refuse `agent.answer_tag` in an agent that cannot honour it: a `ConfigError` saying `why` and naming the fix."""
    if answer_tag is not None:
        raise ConfigError(f"{agent} cannot honour agent.answer_tag={answer_tag!r}: {why}. The setting is "
                          "agent=openai's (a model asked to tag its answer): drop it, or use agent=openai")
