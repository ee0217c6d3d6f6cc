"""A policy served by any OpenAI-compatible chat-completions endpoint with native tool calling.

vLLM, SGLang, OpenAI and Ollama all speak this wire format, so one loop covers them: the model
sees the mode's system prompt, the question and the tools the environment offers (re-read every
turn, since dynamic tool sets change them), asks for tool calls, reads their results, and ends
the task with a message that calls no tool. HTTP, timeouts and retries live in
`rollout.llm.chat_client`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from rollout.agents.base import AgentResult, TaskTools, call_tool, query_functions
from rollout.agents.text_tool_calls import TextToolCalls, find_text_tool_calls, no_parser_message, unread_call_error
from rollout.answer_tag import check_answer_tag, last_answer, system_prompt_with_answer_tag, tag_strings
from rollout.errors import ConfigError, ContextWindowExceeded, LLMError, ServerSetupError, UnreadableToolCall
from rollout.events import CUT_AT_LIMIT, EventLog, LLMOutputEvent, LLMThinkingEvent
from rollout.llm.chat_client import ChatClient, Completion, LLMSettings, RetryPolicy, ToolCallRequest, refused
from rollout.llm.settings import refuse_sampling_seed
from rollout.run_folder import spec_name

logger = logging.getLogger(__name__)

FINAL_TURN_PROMPT = "You have used all your tool calls. Answer the question now with a short final answer."
"""Added as a user message before the last request when earlier turns were spent on tools."""

TEXT_TOOL_CALLS = ("refuse", "parse")
"""`agent.text_tool_calls`: what a tool call the server returned as text means. `refuse`: the server has no tool
parser, and the run stops naming the flag to set; `parse`: the agent parses it here and runs it."""
TOOL_CHOICES = ("auto", "required", "none")
"""`agent.tool_choice`, as OpenAI's field (or an offered tool's name, sent as `{"type": "function", ...}`): sent on
every turn but the last, which is sent with "none" so the model answers."""
PROBE_PROMPT = "Call the {name} tool once"
"""The tool-parser preflight's question (`check_tools`), with " to search for: capital of France." for a search."""
PROBE_MAX_TOKENS = 256
"""The tool-parser preflight's completion budget: room for one call, and for a short thought before it."""

_ANSWER_LINE = re.compile(r"^\s*(?:\*\*)?(?:final\s+answer|exact\s+answer|answer)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*(.*)$",
                          re.IGNORECASE | re.MULTILINE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def extract_answer(content: str | None) -> str:
    """The short answer in a final message: after the last "Answer:" / "Final answer:" line if there is
    one (the next non-empty line when that line ends there), else the whole message, stripped."""
    text = (content or "").strip()
    found = list(_ANSWER_LINE.finditer(text))
    if not found:
        return text
    last = found[-1]
    answer = last.group(1).strip().strip("*").strip()
    if not answer:
        rest = [line.strip() for line in text[last.end():].splitlines() if line.strip()]
        answer = rest[0] if rest else ""
    return answer


def split_thinking(content: str | None) -> tuple[str | None, str | None]:
    """(content, thinking) for a model that writes its reasoning inline in `<think>` tags (no reasoning parser)."""
    if not content or "<think>" not in content:
        return content, None
    thinking = "\n".join(t.strip() for t in _THINK.findall(content))
    rest = _THINK.sub("", content)
    if "<think>" in rest:  # cut off mid-thought: all of it is thinking
        head, _, tail = rest.partition("<think>")
        thinking, rest = "\n".join(filter(None, [thinking, tail.strip()])), head
    return rest.strip() or None, thinking or None


def parse_arguments(call: ToolCallRequest, *, cut: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None) when the call's arguments are a JSON object, else (None, the error the model reads).
    `cut`: the reply was cut at the token limit, which the error then names as the likely cause."""
    if call.type != "function":
        return None, f"Error: tool call type {call.type!r} is not supported; call a function tool."
    raw = call.arguments.strip() or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as e:
        why = " (your reply was cut at the token limit: keep the arguments short)" if cut else ""
        return None, (f"Error: the arguments of {call.name} are not valid JSON ({e.msg} at position {e.pos}){why}; "
                      "the tool was not called. Call it again with a JSON object matching its parameters.")
    if not isinstance(arguments, dict):
        return None, (f"Error: the arguments of {call.name} must be a JSON object, got {type(arguments).__name__}; "
                      "the tool was not called. Call it again with a JSON object matching its parameters.")
    return arguments, None


def _as_json(arguments: str) -> str:
    """A call's arguments as the history sends them back: as written when they are JSON, else as a JSON string of
    what was written (Qwen's templates show it as written). Servers that render the history through a chat template
    parse these arguments (llama.cpp and vLLM answer HTTP 500 when they are not JSON), so a call the model could not
    write would otherwise end the task a turn later, before the model had read why its call was not run."""
    if not arguments.strip():  # run as {}
        return "{}"
    try:
        json.loads(arguments)
    except json.JSONDecodeError:
        return json.dumps(arguments)
    return arguments


class OpenAIAgent:
    """Tool-calling loop against an OpenAI-compatible endpoint (`agent=openai`).

    Per task: messages = [system prompt of the mode, question]; each turn one request with the tools
    offered now and `agent.tool_choice` said outright ("auto" by default; llama.cpp's server, for one, leaves tools
    out of the prompt without it); the requested calls run in order and their results go back as tool messages; a
    message without tool calls is the answer. The last of `max_turns` requests is made with
    `tool_choice="none"` so the model must answer; a reply to it that is only a tool call (native, or written as
    text) is no answer: the task ends `out_of_turns` with prediction "". `AgentResult.turns` counts requests and
    `AgentResult.usage` sums their tokens (and `cost_usd` when `llm.prices` are both set). Each reply's
    `finish_reason` goes into its `LLMOutputEvent`: an answer cut at the token limit (`length`) is still the
    answer, and the task's record flags it (`TaskResult.truncated`); tool arguments cut mid-JSON go back to
    the model as an error naming the cut.

    The agent's limits are its outcome: a conversation the server refuses as longer than the model's context (or that
    `llm.context_window` shows cannot fit) ends the task with prediction "" and `AgentResult.out_of_context`, the
    server's message kept. A tool call the server returns as text on a turn that offered tools means it has no tool
    parser: with `text_tool_calls="refuse"` that stops the run (`ServerSetupError`, naming the server flag), with
    `"parse"` the call is parsed here (`rollout.agents.text_tool_calls`) and run. A reply that opens as a call to an
    offered tool is a call attempt whatever follows: one whose arguments cannot be read (no JSON object, or cut short)
    goes back to the model as an error saying why, in either setting (a server's tool parser returns such a call as
    text too, so it tells nothing of the server), and on the last turn it is no answer (`out_of_turns`).

    The answer is the final message's short answer (`extract_answer`); with `answer_tag` (`agent.answer_tag=answer`)
    it is the content of the last complete `<answer>…</answer>` of that reply as the model wrote it, read by the
    training reward's own function (`rollout.answer_tag.last_answer`), and the system prompt ends with the sentence
    asking for the tag (`system_prompt_with_answer_tag`, the text `rollout export --questions` writes too). A final
    message without a complete tag is answered "" and flagged (`AgentResult.no_answer_tag`), as the reward scores it 0.

    Failures: 429, 5xx, connection errors and timeouts are retried with capped exponential backoff and
    jitter (`llm.max_retries`, `backoff_*`); a deterministic refusal or running out of retries raises
    `LLMError`, which the worker records as that task's error while the run goes on.

    `check()` is a preflight for the driver to await once before workers start: one tiny request
    (max_tokens=1) with a short retry budget, so a wrong URL, key or model fails the run in seconds
    with a message naming `llm.base_url` and the fix, instead of failing every task. `check_tools()`, once the
    gateway's tools are known, makes one request offering one of them: a server that answers with the call
    written as text has no tool parser, and the run stops before its first task.
    """

    def __init__(
        self,
        llm: Mapping[str, Any] | DictConfig,
        max_turns: int = 8,
        parallel_tool_calls: bool | None = None,
        tool_choice: str = "auto",
        text_tool_calls: str = "refuse",
        tokenizer: str | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        retry_after_max_s: float = 60.0,
        answer_tag: str | None = None,
    ) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"agent.max_turns={max_turns!r} must be a whole number of at least 1 (the answering turn)")
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise ConfigError(f"agent.parallel_tool_calls={parallel_tool_calls!r} must be true, false or null")
        if not isinstance(tool_choice, str) or not tool_choice.strip():
            raise ConfigError(f"agent.tool_choice={tool_choice!r} must be one of {', '.join(TOOL_CHOICES)} or the "
                              "name of a tool the mode offers")
        if text_tool_calls not in TEXT_TOOL_CALLS:
            raise ConfigError(f"agent.text_tool_calls={text_tool_calls!r} must be one of {', '.join(TEXT_TOOL_CALLS)}")
        self.settings = LLMSettings.from_config(llm)
        refuse_sampling_seed(self.settings, "openai")
        self.max_turns = max_turns
        self.parallel_tool_calls = parallel_tool_calls
        self.tool_choice = tool_choice.strip()
        self.text_tool_calls = text_tool_calls
        self.answer_tag = check_answer_tag(answer_tag)
        self.retry = RetryPolicy.from_config(self.settings.max_retries, backoff_base_s, backoff_max_s, retry_after_max_s)
        self.client = ChatClient(self.settings, self.retry, tokenizer=tokenizer)

    async def check(self, max_retries: int = 2, timeout_s: float = 30.0) -> None:
        """Fail fast when the endpoint is unreachable or refuses: `LLMError` naming llm.base_url and the fix."""
        await self.client.preflight("openai", max_retries=max_retries, timeout_s=timeout_s)

    def check_tools(self, tool_specs: list[dict[str, Any]]) -> None:
        """One request offering one of the run's tools, before any task: a reply that writes the call as text means
        the server has no tool parser (`ServerSetupError` naming the flag, unless `text_tool_calls="parse"`). A reply
        that calls the tool natively, or does not call it, lets the run go on."""
        names = [spec_name(spec) for spec in tool_specs]
        if self.tool_choice not in TOOL_CHOICES and self.tool_choice not in names:
            raise ConfigError(f"agent.tool_choice={self.tool_choice} is not a tool this mode offers: choose one of "
                              f"{', '.join(TOOL_CHOICES)} or a tool's name ({', '.join(names) or 'none offered'})")
        if tool_specs:
            asyncio.run(self._probe_tool_parser(tool_specs))

    async def _probe_tool_parser(self, tool_specs: list[dict[str, Any]]) -> None:
        searches = query_functions(tool_specs)
        spec = {"type": "function", "function": searches[0]} if searches else tool_specs[0]
        name = spec_name(spec)
        limit = "max_completion_tokens" if "max_completion_tokens" in self.settings.sampling else "max_tokens"
        budget = min(int(self.settings.sampling.get(limit) or PROBE_MAX_TOKENS), PROBE_MAX_TOKENS)
        ask = PROBE_PROMPT.format(name=name) + (" to search for: capital of France." if searches else ".")
        try:
            reply = await self.client.complete([{"role": "user", "content": ask}], tools=[spec], tool_choice="auto",
                                               sampling={limit: budget}, max_retries=min(2, self.settings.max_retries),
                                               timeout_s=min(30.0, self.settings.timeout_s))
        except ContextWindowExceeded as e:
            logger.warning("tool-parser preflight: one tool and one line already overflow the model's context (%s)", e)
            return
        except LLMError as e:
            if refused(e):  # every task's request would be refused the same way
                raise LLMError(f"agent=openai preflight with a tool (llm.model={self.settings.model}) failed: "
                               f"{e}") from e
            logger.warning("tool-parser preflight: no answer (%s); going on without knowing how tool calls come "
                           "back", e)
            return
        finally:
            await self.client.aclose()
        found = None if reply.tool_calls else find_text_tool_calls(split_thinking(reply.content)[0], {name})
        # A call that cannot be read proves nothing: a server's tool parser returns such a call as text too.
        read = found is not None and any(call.unread is None for call in found.calls)
        if read and self.text_tool_calls == "refuse":
            raise ServerSetupError(no_parser_message(found, reply.content or ""))
        logger.debug("tool-parser preflight: %s", "native tool call" if reply.tool_calls else
                     "tool call as text, parsed here" if read else "no tool call (inconclusive)")

    deterministic = False

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt_with_answer_tag(tools.system_prompt, self.answer_tag)},
            {"role": "user", "content": question},
        ]
        for turn in range(1, self.max_turns + 1):
            final = turn == self.max_turns
            if final and turn > 1:
                messages.append({"role": "user", "content": FINAL_TURN_PROMPT})
            specs = list(tools.tool_specs)
            try:
                reply = await self.client.complete(
                    messages, tools=specs or None, tool_choice=self._choice(specs, final=final),
                    parallel_tool_calls=self.parallel_tool_calls, sampling=None if seed is None else {"seed": seed},
                )
            except ContextWindowExceeded as e:  # the agent's limit: its outcome, scored, with the server's words
                logger.debug("turn %d: out of context: %s", turn, e)
                return AgentResult("", turn - 1, messages, self.settings.priced(events.usage()), out_of_context=True,
                                   stop_message=str(e))
            except UnreadableToolCall as e:  # the model wrote this turn's reply, which the server lost with its error
                logger.debug("turn %d: the server could not read the model's tool call: %s", turn, e)
                return AgentResult("", turn, messages, self.settings.priced(events.usage()), unreadable_call=True,
                                   stop_message=str(e))
            content, thinking = split_thinking(reply.content)
            thinking = "\n".join(filter(None, [reply.reasoning, thinking])) or None
            written = None if reply.tool_calls else find_text_tool_calls(content, {spec_name(s) for s in specs})
            if written is not None:
                content = written.rest or None
            cut = reply.finish_reason == CUT_AT_LIMIT
            if final:
                parsed = []
            elif reply.tool_calls:
                parsed = [(call, *parse_arguments(call, cut=cut)) for call in reply.tool_calls]
            else:
                parsed = self._parsed(written, reply, cut=cut)
            calls = [call for call, _, _ in parsed]
            if thinking:
                events.emit(LLMThinkingEvent(turn=turn, content=thinking))
            events.emit(LLMOutputEvent(
                turn=turn, content=content,
                tool_calls=[{"id": c.id, "name": c.name, "arguments": args if args is not None else c.arguments}
                            for c, args, _ in parsed],
                usage=reply.usage, latency_ms=reply.latency_ms, finish_reason=reply.finish_reason,
                sent=reply.sent, request_ms=reply.request_ms, server_ms=reply.server_ms,
            ))
            messages.append(self._assistant_message(content, calls))
            if not calls:
                if self.answer_tag is None:
                    answer, tagged = extract_answer(content), None
                else:
                    tagged = last_answer(reply.content or "", *tag_strings(self.answer_tag))
                    answer = tagged or ""
                # A last reply that only calls a tool (tool_choice="none" notwithstanding) has not answered.
                no_answer = final and not answer and bool(reply.tool_calls or written)
                untagged = self.answer_tag is not None and tagged is None and not no_answer
                return AgentResult(answer, turn, messages, self.settings.priced(events.usage()), out_of_turns=no_answer,
                                   no_answer_tag=untagged)
            for call, arguments, problem in parsed:
                text = problem if arguments is None else (await call_tool(tools, call.name, arguments)).text
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        raise AssertionError("unreachable: the last turn always answers")

    def _choice(self, specs: list[dict[str, Any]], *, final: bool) -> str | dict[str, Any] | None:
        """The request's `tool_choice`: said outright whenever tools are offered (llama.cpp's server, for one, leaves
        them out of the prompt without it), "none" on the last turn; a tool's name as OpenAI's object naming it, and
        "auto" on a turn whose tools (a dynamic tool set) do not include it."""
        if not specs:
            return None
        if final:
            return "none"
        if self.tool_choice in TOOL_CHOICES:
            return self.tool_choice
        if self.tool_choice in {spec_name(s) for s in specs}:
            return {"type": "function", "function": {"name": self.tool_choice}}
        return "auto"

    def _parsed(self, written: TextToolCalls | None, reply: Completion, *,
                cut: bool) -> list[tuple[ToolCallRequest, dict[str, Any] | None, str | None]]:
        """The calls a reply wrote as text, as (request, arguments, error the model reads) to run
        (`text_tool_calls="parse"`); with "refuse" a call that could be read stops the run: the server has no tool
        parser. A call that could not be read goes to the model as written, with why, in either setting: a server's
        tool parser returns such a call as text too, so it tells nothing of the server."""
        if written is None:
            return []
        if self.text_tool_calls == "refuse" and any(c.unread is None for c in written.calls):
            raise ServerSetupError(no_parser_message(written, reply.content or ""))
        parsed: list[tuple[ToolCallRequest, dict[str, Any] | None, str | None]] = []
        for i, c in enumerate(written.calls):
            request = ToolCallRequest(id=f"call_{uuid.uuid4().hex[:12]}_{i}", name=c.name,
                                      arguments=json.dumps(c.arguments) if c.unread is None else c.unread)
            parsed.append((request, c.arguments, None) if c.unread is None
                          else (request, None, unread_call_error(c, cut=cut)))
        return parsed

    @staticmethod
    def _assistant_message(content: str | None, calls: list[ToolCallRequest]) -> dict[str, Any]:
        # A call without text goes back with content "", not null: OpenAI and vLLM take either, llama-cpp-python's
        # server refuses null (HTTP 500, "Input should be a valid string").
        message: dict[str, Any] = {"role": "assistant", "content": "" if content is None and calls else content}
        if calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": _as_json(c.arguments)}}
                                     for c in calls]
        return message
