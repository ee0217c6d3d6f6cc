"""A policy that writes plain text with tags, as RL-trained search agents do (`agent=search_r1`, `agent=tagged`).

Checkpoints trained by Search-R1, R1-Searcher or ReCall call no tools natively: they write `<search> query
</search>` and continue after the harness appends `<information>…</information>` to their own text. This agent
runs that loop against an OpenAI-compatible server, with the protocol (tags, templates, feedback, instruction)
from `rollout.agents.tag_protocol` and HTTP, retries and the preflight from `rollout.llm.chat_client`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from rollout.agents.base import AgentResult, TaskTools, call_tool
from rollout.agents.tag_protocol import Step, Tag, TagProtocol
from rollout.answer_tag import refuse_answer_tag
from rollout.errors import ConfigError, ContextWindowExceeded
from rollout.events import EventLog, LLMOutputEvent, LLMThinkingEvent
from rollout.llm.chat_client import ChatClient, Completion, LLMSettings, RetryPolicy, plain
from rollout.llm.chat_template import ChatTemplate, load_chat_template
from rollout.llm.settings import refuse_sampling_seed

logger = logging.getLogger(__name__)

WIRES = ("chat", "completions")
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
"""vLLM's and SGLang's request keys for continuing the last (assistant) message instead of starting a new one."""


class TaggedAgent:
    """The tag loop (`agent=tagged`; `agent=search_r1` and `agent=r1_searcher` are presets of it).

    Per task the instruction (`agent.instruction` with the question) is the user message. Each turn the model
    writes text until a closing tag (the stop strings); the first complete action decides: a search tag calls its
    tool (`agent.searches[i].tool`, or the mode's first query tool) with the text between the tags as `query` and
    `agent.top_k`, and its passages, written with `agent.passage` inside `agent.information`, are appended to the
    model's text; the answer tag ends the task with its content as the prediction; a turn with neither gets
    `agent.invalid` appended (or, with `agent.invalid` null, ends the task with prediction ""). Generation then
    continues from the whole text. After `agent.max_turns` turns
    without an answer the task ends with prediction "" and `AgentResult.out_of_turns` (a search asked on the last
    turn is not run: nothing would read it).

    Wire paths (`agent.wire`): `chat` posts [user(instruction), assistant(text so far)] to /chat/completions with
    `continue_final_message` (the first turn, with no text yet, a plain [user] request); `completions` posts the
    instruction rendered with the model's own chat template (`agent.chat_template`; without one the instruction
    is the prompt as is) followed by the text so far to /completions. A server that drops the matched stop string
    and one that keeps it give the same text: a dropped closing tag is put back; so do one that answers a continued
    message with the continuation alone (vLLM, SGLang) and one that sends the message back ahead of it (llama.cpp).

    `AgentResult.messages` — the rule exporters rely on: [{"role": "user", "content": the instruction}], then per
    turn {"role": "assistant", "content": the text the model wrote that turn, closing tag included} and, after a
    search or an invalid turn, {"role": "user", "content": the information block or the feedback, exactly as
    appended}. The prompt the model continued at any turn is the instruction's rendering (the chat template's,
    with the generation prompt, or the instruction itself) followed by the concatenation of every later
    message's content, byte for byte.

    Each turn emits an `LLMOutputEvent` (the turn's text, its finish_reason, usage and latency; a search as its
    one `tool_calls` entry). A reply cut at the token limit keeps finish_reason `length`; without a complete tag
    it is an invalid turn, never an answer or a search, and the task's `truncated` flag says so when it is the
    last. A conversation that outgrows the model's context window ends the task with prediction "" and
    `AgentResult.out_of_context`, as with `agent=openai`. Retries, timeouts and the preflight (`check`) are those of
    `agent=openai`.
    """

    deterministic = False

    def __init__(
        self,
        llm: Mapping[str, Any] | DictConfig,
        instruction: str,
        searches: Any,
        answer: Any,
        information: str,
        passage: str,
        strip_results: bool = True,
        no_results: str = "",
        invalid: str | None = None,
        stop: Any = None,
        wire: str = "chat",
        chat_template: str | None = None,
        max_turns: int = 5,
        top_k: int | None = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        retry_after_max_s: float = 60.0,
        tokenizer: str | None = None,
        answer_tag: str | None = None,
    ) -> None:
        refuse_answer_tag(answer_tag, "a tagged-text agent (agent=tagged, search_r1, r1_searcher)",
                          "its answer is already the content of its protocol's answer tag (agent.answer.open and "
                          "agent.answer.close, <answer> and </answer> by default)")
        self.protocol = TagProtocol.from_config(
            instruction=instruction, searches=plain(searches), answer=plain(answer), information=information,
            passage=passage, strip_results=strip_results, no_results=no_results, invalid=invalid, stop=plain(stop))
        if wire not in WIRES:
            raise ConfigError(f"agent.wire={wire!r} must be one of {', '.join(WIRES)}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"agent.max_turns={max_turns!r} must be a whole number of at least 1")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ConfigError(f"agent.top_k={top_k!r} must be a whole number of at least 1, or null for the tool's own")
        if chat_template is not None and wire != "completions":
            raise ConfigError("agent.chat_template is for agent.wire=completions (with agent.wire=chat the server "
                              "applies the model's template): set agent.wire=completions or agent.chat_template=null")
        self.wire = wire
        self.template: ChatTemplate | None = load_chat_template(chat_template) if chat_template else None
        self.max_turns = max_turns
        self.top_k = top_k
        self.settings = LLMSettings.from_config(llm, agent="tagged")
        refuse_sampling_seed(self.settings, "tagged")
        self.retry = RetryPolicy.from_config(self.settings.max_retries, backoff_base_s, backoff_max_s,
                                             retry_after_max_s)
        self.client = ChatClient(self.settings, self.retry, tokenizer=tokenizer)
        # The protocol's stops, then any the llm block sets (an end-of-turn token, say): both are honoured.
        extra = self.settings.sampling.get("stop") or []
        self.stop = list(dict.fromkeys([*self.protocol.stop, *([extra] if isinstance(extra, str) else extra)]))

    async def check(self, max_retries: int = 2, timeout_s: float = 30.0) -> None:
        """Fail fast when the endpoint is unreachable or refuses, on the wire the agent uses."""
        await self.client.preflight("tagged", text=self.wire == "completions", max_retries=max_retries,
                                    timeout_s=timeout_s)

    def check_tools(self, tool_specs: list[dict[str, Any]]) -> dict[Tag, tuple[str, bool]]:
        """Per search tag, the tool it calls and whether `top_k` is passed (`TagProtocol.routes`); the driver calls
        this once before any task starts, so a tag the offered tools cannot serve stops the run."""
        return self.protocol.routes(tool_specs, self.top_k)

    def opening_messages(self, question: str, system_prompt: str) -> list[dict[str, Any]]:
        """The conversation a task opens with, for RL prompts (`rollout export --questions`): the instruction with
        the question as the one user message; the mode's system prompt is not sent (the protocol's instruction
        says what the model may do)."""
        return [{"role": "user", "content": self.protocol.instruction(question=question)}]

    def prompt_head(self, instruction: str) -> str:
        """What precedes the model's text on the completions path: the rendered instruction with the generation
        prompt, or the instruction itself without a chat template."""
        if self.template is None:
            return instruction
        return self.template.render([{"role": "user", "content": instruction}], add_generation_prompt=True)

    @staticmethod
    def chat_messages(instruction: str, text: str) -> list[dict[str, Any]]:
        """The chat path's messages: the instruction, and the text so far as the assistant message to continue."""
        user = {"role": "user", "content": instruction}
        return [user, {"role": "assistant", "content": text}] if text else [user]

    def request(self, instruction: str, head: str | None, parts: list[str]) -> str | list[dict[str, Any]]:
        """The next request's prompt (completions path, `head` given) or messages (chat path), from the contents
        after the instruction so far."""
        text = "".join(parts)
        return head + text if head is not None else self.chat_messages(instruction, text)

    def step(self, reply: Completion, continued: str = "") -> Step:
        """The turn one reply makes: its text, after the `continued` text if the server sent that back first, with
        a dropped closing tag put back, parsed."""
        text = reply.content or ""
        # llama.cpp's llama-server (--jinja) answers a continued assistant message with that message followed by
        # the continuation; vLLM and SGLang send the continuation alone. The feedback in the continued text names
        # the tags ("between <search> and </search>"), which the parser would read as the model's own search.
        if continued and text.startswith(continued):
            text = text[len(continued):]
        text = self.protocol.restore_stop(text, reply.finish_reason, reply.stop, reply.names_stop)
        return self.protocol.parse(text)

    async def _generate(self, request: str | list[dict[str, Any]], seed: int | None) -> Completion:
        sampling: dict[str, Any] = {"stop": self.stop}
        if seed is not None:
            sampling["seed"] = seed
        if isinstance(request, str):
            return await self.client.complete_text(request, sampling=sampling)
        return await self.client.complete(request, sampling=sampling,
                                          extra_body=CONTINUE if len(request) > 1 else None)

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult:
        routes = self.check_tools(list(tools.tool_specs))
        instruction = self.protocol.instruction(question=question)
        head = self.prompt_head(instruction) if self.wire == "completions" else None
        messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        parts: list[str] = []  # the contents after the instruction: the text the model continues
        for turn in range(1, self.max_turns + 1):
            try:
                reply = await self._generate(self.request(instruction, head, parts), seed)
            except ContextWindowExceeded as e:  # the agent's limit: its outcome, scored, with the server's words
                logger.debug("turn %d: out of context: %s", turn, e)
                return AgentResult("", turn - 1, messages, self.settings.priced(events.usage()), out_of_context=True,
                                   stop_message=str(e))
            step = self.step(reply, "".join(parts) if head is None else "")
            search = step.kind == "search" and turn < self.max_turns
            call: dict[str, Any] | None = None
            if search:
                assert step.tag is not None
                name, with_top_k = routes[step.tag]
                call = {"id": f"call_{turn}", "name": name,
                        "arguments": {"query": step.content, **({"top_k": self.top_k} if with_top_k else {})}}
            if reply.reasoning:  # a server-side reasoning parser took part of the text out
                events.emit(LLMThinkingEvent(turn=turn, content=reply.reasoning))
            events.emit(LLMOutputEvent(turn=turn, content=step.text, tool_calls=[call] if call else [],
                                       usage=reply.usage, latency_ms=reply.latency_ms,
                                       finish_reason=reply.finish_reason, sent=reply.sent,
                                       request_ms=reply.request_ms, server_ms=reply.server_ms))
            messages.append({"role": "assistant", "content": step.text})
            parts.append(step.text)
            if step.kind == "answer":
                return AgentResult(step.content, turn, messages, self.settings.priced(events.usage()))
            if turn == self.max_turns:
                break
            if step.kind == "invalid" and self.protocol.invalid is None:  # the protocol gives no second chance
                return AgentResult("", turn, messages, self.settings.priced(events.usage()))
            if call is not None:
                appended = self.protocol.observation(await call_tool(tools, call["name"], dict(call["arguments"])))
            else:
                appended = self.protocol.invalid or ""
            messages.append({"role": "user", "content": appended})
            parts.append(appended)
        logger.debug("no answer within agent.max_turns=%d", self.max_turns)
        return AgentResult("", self.max_turns, messages, self.settings.priced(events.usage()), out_of_turns=True)
