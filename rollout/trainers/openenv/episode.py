"""Episodes of an experiment: one question each, its tools on the experiment's gateway, rewarded with rollout's score.

`ServedExperiment` is what every episode shares: the questions, the tools the gateway offers (listed once, at
start), the agent's tag protocol when it has one, the reward metric. An `Episode` is one client session's episodes,
one at a time: `reset` picks a question and opens the episode's own MCP session (its calls are the ledger's task
`episode_id`, marked training traffic); `step` takes a tool call, the answer, or a turn of protocol text; the episode
ends at the answer (rewarded with the evaluation's metric) or at the experiment's `max_turns` (reward 0), and its
session is closed then, at the next reset, or when the client goes away.

A policy answers in one of two ways, which an episode does not mix: function calling (`call_tool` of a listed tool,
then `call_tool` of `submit_answer`), or tag-protocol text (`text` turns, read by `TextEpisode` exactly as the
evaluated tagged agent reads its model's replies). Either way a turn is one policy action: the `max_turns`-th may
only answer, as in an evaluation (a search there is not run and the episode ends unanswered).
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envs.http_mcp_env import DEFAULT_SYSTEM_PROMPT
from rollout.agents.tag_protocol import Tag, TagProtocol
from rollout.errors import ConfigError, EpisodeError, GatewayError
from rollout.records import Question
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.openenv.messages import (
    ANSWER_SPEC,
    ANSWER_TOOL,
    CallToolAction,
    CallToolObservation,
    EpisodeStart,
    EpisodeState,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    ResetObservation,
    ResetRequest,
    TextAction,
    ToolError,
    ToolSpec,
    answer_observation,
    call_observation,
    step_result,
    text_observation,
    tool_spec,
)
from rollout.trainers.reward import DEFAULT_METRIC, metric_function, score
from rollout.trainers.text_episode import TextEpisode
from rollout.trainers.tool_session import GatewayTarget, ToolSession

logger = logging.getLogger(__name__)

Style = Literal["tool", "text"]


@dataclass(frozen=True, slots=True)
class ServedExperiment:
    """The experiment an environment serves: what all its episodes share."""

    experiment: TrainingExperiment
    questions: Sequence[Question]
    positions: dict[str, int]
    """Question id → position, for a reset by id."""
    target: GatewayTarget
    tools: tuple[ToolSpec, ...]
    """The gateway's tools as the evaluated agent is offered them, then the answer tool."""
    protocol: TagProtocol | None
    routes: dict[Tag, tuple[str, bool]] | None
    no_text: str | None
    """Why text actions are refused (the agent speaks no tag protocol); None when they are taken."""
    metric: str

    @classmethod
    async def open(cls, experiment: TrainingExperiment, target: GatewayTarget,
                   metric: str = DEFAULT_METRIC) -> ServedExperiment:
        """Read the questions and list the gateway's tools (a `GatewayError` when it cannot be reached); a question
        set with no question, or a gateway tool named like the answer tool, is a `ConfigError`."""
        metric_function(metric)
        # Held in memory: a reset finds its question at once (QuestionSet reads its source up to the index).
        questions = list(experiment.questions())
        if not questions:
            raise ConfigError(f"experiment {' '.join(experiment.overrides) or '(the demo)'} has no question to serve")
        async with ToolSession(target, "openenv-tool-listing") as listing:  # lists the tools, calls none
            specs = listing.tool_specs
        gateway_tools = [tool_spec(s) for s in specs]
        if any(t.name == ANSWER_TOOL for t in gateway_tools):
            raise ConfigError(f"the gateway offers a tool named {ANSWER_TOOL}, the name of the episode's answer tool: "
                              "serve a gateway file without it")
        protocol: TagProtocol | None = None
        routes: dict[Tag, tuple[str, bool]] | None = None
        no_text: str | None = None
        try:
            protocol = experiment.protocol()
        except ConfigError as e:
            no_text = f"text actions need an agent that speaks a tag protocol: {e}"
        if protocol is not None:
            try:
                routes = protocol.routes(specs, experiment.top_k)
            except ConfigError as e:  # its searches have no tool here: tool actions are still taken
                protocol, no_text = None, f"text actions are not taken with these tools: {e}"
        return cls(experiment, questions, {q.id: i for i, q in enumerate(questions)}, target,
                   (*gateway_tools, ANSWER_SPEC), protocol, routes, no_text, metric)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def max_turns(self) -> int:
        return self.experiment.max_turns

    def question(self, request: ResetRequest) -> Question:
        """The question a reset asks for: by id, by seed (question seed % N, so seeds 0..N-1 walk the set in
        order), else a random one."""
        if request.question_id is not None and request.seed is not None:
            raise EpisodeError("reset takes seed or question_id, not both")
        if request.question_id is not None:
            position = self.positions.get(request.question_id)
            if position is None:
                raise EpisodeError(f"question_id {request.question_id!r} is not among this experiment's "
                                   f"{len(self.questions)} questions (e.g. {self.questions[0].id!r})")
            return self.questions[position]
        if request.seed is not None:
            return self.questions[request.seed % len(self.questions)]
        return self.questions[random.randrange(len(self.questions))]

    def opening(self, question: str) -> list[dict[str, str]]:
        """The conversation the evaluated agent opens with: the protocol's instruction, or the mode's system prompt
        and the question (as `rollout export --questions` writes them)."""
        if self.protocol is not None:
            return [{"role": "user", "content": self.protocol.instruction(question=question)}]
        system_prompt = self.experiment.config.system_prompt or DEFAULT_SYSTEM_PROMPT
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]


class Episode:
    """One client session's episodes, one at a time."""

    def __init__(self, served: ServedExperiment):
        self.served = served
        self.state = EpisodeState(max_turns=served.max_turns)
        self.question: Question | None = None
        self.tools: ToolSession | None = None
        self.text: TextEpisode | None = None
        self.style: Style | None = None

    async def reset(self, request: ResetRequest) -> dict[str, Any]:
        """Start an episode (ending the one before): its question, its MCP session; the first observation."""
        question = self.served.question(request)  # a bad request leaves the episode before as it was
        await self.close()
        self.question, self.text, self.style = None, None, None
        self.state = EpisodeState(max_turns=self.served.max_turns)
        episode_id = request.episode_id or uuid.uuid4().hex
        tools = ToolSession(self.served.target, episode_id, step=request.training_step)
        try:
            await tools.open()
        except GatewayError as e:
            raise EpisodeError(f"could not open the episode's tool session: {e}") from None
        self.tools, self.question = tools, question
        if self.served.protocol is not None and self.served.routes is not None:
            self.text = TextEpisode(self.served.protocol, self.served.routes, tools, question.golden_answers,
                                    top_k=self.served.experiment.top_k, max_turns=self.served.max_turns,
                                    metric=self.served.metric)
        self.state = EpisodeState(episode_id=episode_id, question_id=question.id, max_turns=self.served.max_turns)
        logger.debug("episode %s: question %s", episode_id, question.id)
        start = EpisodeStart(episode_id=episode_id, question_id=question.id, question=question.question,
                             messages=self.served.opening(question.question), max_turns=self.served.max_turns)
        return step_result(ResetObservation(metadata=start), None, False)

    async def step(self, action: ListToolsAction | CallToolAction | TextAction) -> dict[str, Any]:
        """Take one action; one that cannot be taken now raises `EpisodeError` and leaves the episode as it was."""
        if isinstance(action, ListToolsAction):  # not a turn, and allowed before a reset, as OpenEnv's MCP envs do
            if self.state.episode_id is not None:
                self.state.step_count += 1
            return step_result(ListToolsObservation(tools=list(self.served.tools)), None, self.state.done)
        style: Style = "text" if isinstance(action, TextAction) else "tool"
        self._check_can_take(style)
        self.state.step_count += 1
        self.style = style
        if isinstance(action, TextAction):
            return await self._text(action)
        return await self._call(action)

    def _check_can_take(self, style: Style) -> None:
        if self.question is None:
            raise EpisodeError("no episode: send reset first (it picks the question)")
        if self.state.done:
            raise EpisodeError(f"the episode has ended (reward {self.state.reward}): send reset for the next question")
        if style == "text" and self.text is None:
            raise EpisodeError(self.served.no_text or "text actions are not taken by this environment")
        if self.style is not None and self.style != style:
            raise EpisodeError(f"this episode is played with {self.style} actions; one episode does not mix text "
                               "turns with call_tool: send reset to start one the other way")

    async def _call(self, action: CallToolAction) -> dict[str, Any]:
        assert self.tools is not None and self.question is not None
        self.state.turns += 1
        name, arguments = action.tool_name, action.arguments
        last = self.state.turns >= self.served.max_turns
        if name == ANSWER_TOOL:
            answer = arguments.get("answer")
            if isinstance(answer, str) and set(arguments) == {"answer"}:
                reward = score(answer, self.question.golden_answers, self.served.metric)
                return await self._end(answer_observation(answer, reward), reward)
            error = ToolError(error_type="invalid_args",
                              message=f'{ANSWER_TOOL} takes {{"answer": TEXT}}, got {json.dumps(arguments)}')
        elif name not in self.served.tool_names:
            error = ToolError(error_type="tool_not_found",
                              message=f"unknown tool {name!r}: this environment offers "
                                      f"{', '.join(self.served.tool_names)}")
        elif last:
            error = ToolError(error_type="execution_error",
                              message=f"out of turns: turn {self.state.turns} of {self.served.max_turns} is left "
                                      f"for the answer ({ANSWER_TOOL}), so {name} was not called")
        else:
            result = await self.tools.call(name, arguments)
            return step_result(call_observation(name, result, self.tools.calls[-1]), 0.0, False)
        if not last:
            return step_result(CallToolObservation(tool_name=name, error=error), 0.0, False)
        error.message += f"; that was the last of {self.served.max_turns} turns: the episode ended unanswered"
        return await self._end(CallToolObservation(tool_name=name, error=error), 0.0)

    async def _text(self, action: TextAction) -> dict[str, Any]:
        assert self.text is not None
        turn = await self.text.step(action.text, stopped=action.stopped)
        self.state.turns = self.text.turns
        observation = text_observation(turn)
        return await self._end(observation, turn.reward) if turn.done else step_result(observation, 0.0, False)

    async def _end(self, observation: Observation, reward: float) -> dict[str, Any]:
        self.state.done, self.state.reward = True, reward
        logger.debug("episode %s: done after %d turns, reward %s", self.state.episode_id, self.state.turns, reward)
        await self.close()  # the session is freed at once: a trainer may hold many finished episodes open
        return step_result(observation, reward, True)

    async def close(self) -> None:
        """Close the episode's MCP session, if open (the episode's state stays readable)."""
        tools, self.tools = self.tools, None
        if tools is not None:
            await tools.close()
