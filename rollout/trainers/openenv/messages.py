"""OpenEnv's wire format, as openenv-core 0.3.0's clients send and read it: the messages, actions, observations,
state and errors of `rollout env`.

A step's answer is `{"observation": {...}, "reward": float | null, "done": bool}` (OpenEnv's `serialize_observation`);
over the WebSocket `/ws` it comes as `{"type": "observation", "data": <that>}`, the state as
`{"type": "state", "data": {...}}`, an error as `{"type": "error", "data": {"message", "code"}}` (`EnvClient` raises
it as `RuntimeError("Server error: <message> (code: <code>)")`).

Actions are told apart by `type`: OpenEnv's MCP actions `list_tools` and `call_tool` (`ListToolsAction`,
`CallToolAction`, what `MCPToolClient` sends), and `text`, one turn of a tag-protocol policy. Observations carry the
fields `MCPToolClient._parse_result` reads: `tools` for a tool list, `tool_name`/`result`/`error` for a tool call,
and `metadata` for the rest (it keeps nothing else), so the question of a reset travels in `metadata`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from rollout.records import ToolCallRecord, ToolResult
from rollout.trainers.text_episode import Turn, TurnKind

ANSWER_TOOL = "submit_answer"
"""The tool a function-calling policy answers with (as OpenEnv's FinQA environment names it): it ends the episode
and is scored. Listed with the gateway's tools."""

ERROR_CODES = ("INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR")
"""The `code`s of OpenEnv's WebSocket errors (`WSErrorCode`) this server sends."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- requests ---------------------------------------------------------------------------------------------------

class ResetRequest(_Strict):
    """`reset(**kwargs)`: which question, and the ids the ledger records."""

    seed: int | None = Field(default=None, ge=0, description="picks question seed % N, N the number of questions")
    question_id: str | None = Field(default=None, description="picks the question with this id")
    episode_id: str | None = Field(default=None, max_length=255,
                                   description="the episode's id, the task id of its calls in the gateway's ledger")
    training_step: int | None = Field(default=None, ge=0, description="the trainer's step, kept with each call")


class ListToolsAction(_Strict):
    type: Literal["list_tools"]
    metadata: dict[str, Any] = Field(default_factory=dict)


class CallToolAction(_Strict):
    type: Literal["call_tool"]
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class TextAction(_Strict):
    """One turn of policy text under the experiment's tag protocol (`<search>...</search>`, `<answer>...</answer>`)."""

    type: Literal["text"]
    text: str
    stopped: bool = Field(default=True, description="the generation ended at a stop string or the end of sequence, "
                                                    "not at its token limit (a dropped closing tag is put back)")
    metadata: dict[str, Any] = Field(default_factory=dict)


Action = Annotated[ListToolsAction | CallToolAction | TextAction, Field(discriminator="type")]
ACTION = TypeAdapter(Action)


# --- observations -----------------------------------------------------------------------------------------------

class EpisodeStart(_Strict):
    episode_id: str
    question_id: str
    question: str
    messages: list[dict[str, str]] = Field(description="the conversation the evaluated agent opens with")
    max_turns: int
    answer_tool: str = ANSWER_TOOL


class ResetObservation(_Strict):
    metadata: EpisodeStart


class ToolSpec(_Strict):
    name: str
    description: str
    input_schema: dict[str, Any]


class ListToolsObservation(_Strict):
    tools: list[ToolSpec]


class TextContent(_Strict):
    type: Literal["text"] = "text"
    text: str


class ToolCallResult(_Strict):
    """A successful call's result, shaped as fastmcp's `CallToolResult` (`MCPToolClient.call_tool` returns `data`)."""

    content: list[TextContent]
    structured_content: dict[str, Any] | None
    meta: dict[str, Any] | None = None
    data: Any
    is_error: bool = False


ToolErrorType = Literal["execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"]


class ToolError(_Strict):
    error_type: ToolErrorType
    message: str


class CallToolObservation(_Strict):
    tool_name: str
    result: ToolCallResult | None = None
    error: ToolError | None = None


class TextObservation(_Strict):
    kind: TurnKind
    text: str = Field(description="the turn as it stays in the conversation")
    reply: str = Field(description="what the policy reads next: the information block or the protocol's feedback")
    answer: str | None = None
    tool_call: dict[str, Any] | None = None


Observation = ResetObservation | ListToolsObservation | CallToolObservation | TextObservation


class EpisodeState(BaseModel):
    """OpenEnv's `State` (`episode_id`, `step_count`) with this environment's own fields."""

    episode_id: str | None = None
    step_count: int = Field(default=0, description="steps taken, tool listings included")
    question_id: str | None = None
    turns: int = Field(default=0, description="policy turns taken: tool calls, answers and text turns")
    max_turns: int
    done: bool = False
    reward: float | None = None


class EnvironmentMetadata(_Strict):
    """What `GET /metadata` answers (OpenEnv's `EnvironmentMetadata`)."""

    name: str
    description: str
    version: str | None = None
    readme_content: str | None = None
    author: str | None = None
    documentation_url: str | None = None


def schemas() -> dict[str, Any]:
    """`GET /schema`: the JSON schemas of the actions, observations and state."""
    return {"action": ACTION.json_schema(), "observation": TypeAdapter(Observation).json_schema(),
            "state": EpisodeState.model_json_schema()}


# --- from rollout's records -------------------------------------------------------------------------------------

ERROR_TYPES: dict[str, ToolErrorType] = {
    "unknown_tool": "tool_not_found",
    "invalid_arguments": "invalid_args",
    "timeout": "timeout",
    "transport_error": "transport_error",
    "upstream_unavailable": "transport_error",
    "cancelled": "transport_error",
    "tool_error": "execution_error",
    "protocol_error": "execution_error",
}
"""A failed call's outcome (`rollout.wire.Outcome`) as OpenEnv's `ToolErrorType`."""


def tool_spec(function_spec: dict[str, Any]) -> ToolSpec:
    """An OpenAI-style function spec (what the evaluated agent is shown) as an MCP tool spec."""
    function = function_spec.get("function", function_spec)
    return ToolSpec(name=function["name"], description=function.get("description") or "",
                    input_schema=function.get("parameters") or {"type": "object", "properties": {}})


ANSWER_SPEC = ToolSpec(
    name=ANSWER_TOOL,
    description="Submit the final answer to the question. Ends the episode; the reward is the answer's score.",
    input_schema={"type": "object", "properties": {"answer": {"type": "string", "description": "the final answer"}},
                  "required": ["answer"]},
)


def call_observation(name: str, result: ToolResult, record: ToolCallRecord) -> CallToolObservation:
    if not result.ok:
        return CallToolObservation(tool_name=name, error=ToolError(error_type=ERROR_TYPES.get(record.outcome,
                                                                                              "execution_error"),
                                                                   message=result.text))
    data = result.structured if result.structured is not None else result.text
    return CallToolObservation(tool_name=name, result=ToolCallResult(
        content=[TextContent(text=result.text)], structured_content=result.structured, data=data))


def answer_observation(answer: str, reward: float) -> CallToolObservation:
    outcome = {"answer": answer, "reward": reward}
    return CallToolObservation(tool_name=ANSWER_TOOL, result=ToolCallResult(
        content=[TextContent(text=f"Answer submitted: {answer}")], structured_content=outcome, data=outcome))


def text_observation(turn: Turn) -> TextObservation:
    return TextObservation(kind=turn.kind, text=turn.text, reply=turn.observation, answer=turn.answer,
                           tool_call=turn.tool_call)


# --- answers and errors -----------------------------------------------------------------------------------------

def step_result(observation: Observation, reward: float | None, done: bool) -> dict[str, Any]:
    """`{"observation", "reward", "done"}`, as OpenEnv serializes a step (every field, null ones too)."""
    return {"observation": observation.model_dump(mode="json"), "reward": reward, "done": done}


def ws_error(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}


def validation_message(e: ValidationError, what: str) -> str:
    """A pydantic error as one line: where and what, for the first few problems."""
    problems = []
    for error in e.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}: {error['msg']}" if where else error["msg"])
    more = f" (and {len(e.errors()) - 3} more)" if len(e.errors()) > 3 else ""
    return f"bad {what}: {'; '.join(problems)}{more}"


ACTION_HELP = ('actions are {"type": "list_tools"}, {"type": "call_tool", "tool_name": NAME, "arguments": {...}} '
               f'(tool_name "{ANSWER_TOOL}" with {{"answer": TEXT}} answers) and {{"type": "text", "text": TURN}}')


def parse_action(data: Any) -> ListToolsAction | CallToolAction | TextAction:
    """A step's action; a malformed one raises `ValueError` with a one-line message naming the fix."""
    try:
        return ACTION.validate_python(data)
    except ValidationError as e:
        raise ValueError(f"{validation_message(e, 'action')}; {ACTION_HELP}") from None


def parse_reset(data: Any) -> ResetRequest:
    """A reset's parameters; bad ones raise `ValueError` with a one-line message."""
    try:
        return ResetRequest.model_validate(data if data is not None else {})
    except ValidationError as e:
        raise ValueError(f"{validation_message(e, 'reset')}; reset takes seed, question_id, episode_id and "
                         "training_step") from None
