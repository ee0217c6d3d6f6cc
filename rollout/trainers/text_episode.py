"""A tag protocol's turn loop, one policy text at a time: what a text-generating policy in a trainer steps through.

`TextEpisode.step(text)` does for one turn what `rollout.agents.tagged.TaggedAgent.run` does with a model's reply:
the turn's first complete action is read (`TagProtocol.parse`); a search calls the tool its tag routes to and the
observation is the protocol's information block; a turn without a tag gets the protocol's feedback (or ends the
episode when it gives none); the answer ends the episode and is scored with rollout's scorer; and the episode ends
unanswered at `max_turns`, where a search is not run, as in an evaluation. So the text a policy reads while
training is the text the evaluated agent reads, byte for byte, and the reward is the evaluation's metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rollout.agents.tag_protocol import Tag, TagProtocol
from rollout.records import ToolResult
from rollout.trainers.reward import DEFAULT_METRIC, score


class Tools(Protocol):
    """What an episode needs of its tools (`rollout.trainers.tool_session.ToolSession` is one)."""

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...


TurnKind = Literal["search", "answer", "invalid", "out_of_turns"]


@dataclass(frozen=True, slots=True)
class Turn:
    """What one policy turn came to."""

    kind: TurnKind
    text: str
    """The turn's text as it stays in the conversation (`Step.text`: what the policy wrote past its first action
    is dropped)."""
    observation: str
    """What the policy reads next: the search's information block, or the protocol's feedback; "" when done."""
    done: bool
    reward: float
    """The answer's score when the episode ends with one; 0 on every other turn."""
    answer: str | None = None
    tool_call: dict[str, Any] | None = None
    """The call a search made: `{"name", "arguments"}`, with `ok` and `outcome` of its result."""


class TextEpisode:
    """One question under a tag protocol, its searches on `tools`, rewarded with `metric` at the answer."""

    def __init__(self, protocol: TagProtocol, routes: dict[Tag, tuple[str, bool]], tools: Tools,
                 golden_answers: Sequence[str], *, top_k: int | None, max_turns: int, metric: str = DEFAULT_METRIC):
        """`routes` is `protocol.routes(tool_specs, top_k)`: the tool each search tag calls."""
        self.protocol = protocol
        self.routes = routes
        self.tools = tools
        self.golden_answers = list(golden_answers)
        self.top_k = top_k
        self.max_turns = max_turns
        self.metric = metric
        self.turns = 0
        self.done = False

    def opening(self, question: str) -> str:
        """The protocol's instruction with the question: the policy's one user message."""
        return self.protocol.instruction(question=question)

    async def step(self, text: str, *, stopped: bool = True, last: bool = False) -> Turn:
        """Read one turn of policy text. `stopped`: the generation ended at a stop string or the end of sequence
        (not cut at its token limit), so a closing tag the server dropped is put back. `last`: no turn can follow
        (a trainer's token budget is spent), so the turn is read as the episode's last: a search is not run."""
        if self.done:
            raise RuntimeError("the episode has ended: start a new one for the next question")
        self.turns += 1
        text = self.protocol.restore_stop(text, "stop" if stopped else "length", None, False)
        step = self.protocol.parse(text)
        if step.kind == "answer":
            return self._end(Turn("answer", step.text, "", True, score(step.content, self.golden_answers, self.metric),
                                  answer=step.content))
        if last or self.turns >= self.max_turns:
            return self._end(Turn("out_of_turns", step.text, "", True, 0.0))
        if step.kind == "invalid":
            if self.protocol.invalid is None:  # the protocol gives no second chance
                return self._end(Turn("invalid", step.text, "", True, 0.0))
            return Turn("invalid", step.text, self.protocol.invalid, False, 0.0)
        assert step.tag is not None
        name, with_top_k = self.routes[step.tag]
        arguments: dict[str, Any] = {"query": step.content, **({"top_k": self.top_k} if with_top_k else {})}
        result = await self.tools.call(name, arguments)
        call = {"name": name, "arguments": arguments, "ok": result.ok}
        return Turn("search", step.text, self.protocol.observation(result), False, 0.0, tool_call=call)

    def _end(self, turn: Turn) -> Turn:
        self.done = True
        return turn
