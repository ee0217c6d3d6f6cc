"""A scripted OpenAI-compatible chat-completions (and completions) server on 127.0.0.1, for testing LLM agents
offline.

It is a real HTTP server (starlette + uvicorn on a free loopback port, in a background thread), so
the agent under test goes through the `openai` SDK, httpx and a socket exactly as it would against
vLLM or OpenAI. Responses are shaped as the OpenAI API shapes them.

Each request takes the next `Reply` from the script; when the script is empty the default policy
answers: a request that offers tools and carries no tool result yet calls the first offered tool
whose parameters have `query`, with the user's question; any other request answers with the first
line of the last tool result (or "I don't know." without one). A request in Search-R1's text protocol (to
/v1/completions, or a chat request with `stop` and no tools) gets Search-R1-shaped text instead: a
`<search>` with the question until the text holds an `<information>` block, then an `<answer>` with the title of
its first passage, each stopped at its closing tag, dropped as vLLM drops it. The server never sees gold answers.

Every request body (and its headers) is recorded so tests can assert on what the agent sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rollout.agents.simulated import query_tool
from rollout.listen import bind_socket
from tests.gateway.loopback import serving

MODEL = "test-model"


@dataclass(frozen=True)
class Text:
    """What a model wrote, sent as a chat completion or a text completion depending on the route asked."""

    text: str
    finish_reason: str | None = "stop"
    stop_field: dict[str, Any] = field(default_factory=dict)
    """The choice's field naming the matched stop: vLLM's `stop_reason`, SGLang's `matched_stop`, or none."""
    tokens: dict[str, int] | None = None


@dataclass
class Reply:
    """One scripted response: a status, a JSON body (or raw text, or a model's `Text`) and headers, after an optional
    delay."""

    status: int = 200
    body: dict[str, Any] | str | Text | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def usage(prompt: int = 20, completion: int = 5) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion(message: dict[str, Any], finish_reason: str | None,
               tokens: dict[str, int] | None = None) -> dict[str, Any]:
    """A chat.completion body around one assistant message (`finish_reason` None is sent as null, as some
    servers do)."""
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": tokens or usage(),
    }


def text_completion(text: str, finish_reason: str | None, tokens: dict[str, int] | None = None,
                    **choice: Any) -> dict[str, Any]:
    """A text_completion body (`POST /v1/completions`), `choice` adding fields to its one choice."""
    return {
        "id": f"cmpl-{time.monotonic_ns()}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, **choice}],
        "usage": tokens or usage(),
    }


def said(text: str, *, stop: str | None = None, keep_stop: bool = False, server: str = "vllm",
         finish_reason: str = "stop", tokens: dict[str, int] | None = None) -> Reply:
    """The model wrote `text` and then `stop`, at which the server stopped: dropping the stop string from the text
    (vLLM's and SGLang's default) or keeping it (`keep_stop`, vLLM's include_stop_str_in_output). `server` names the
    stop as vLLM does (`stop_reason`, null at the end-of-sequence token), as SGLang does (`matched_stop`), or not at
    all ("plain"). `finish_reason="length"`: the text was cut at max_tokens (no stop matched)."""
    matched = stop if finish_reason == "stop" else None
    field_name = {"vllm": "stop_reason", "sglang": "matched_stop", "plain": None}[server]
    stop_field = {field_name: matched} if field_name else {}
    return Reply(body=Text(text + matched if keep_stop and matched else text, finish_reason, stop_field, tokens))


def answer(text: str | None, *, reasoning: str | None = None, tokens: dict[str, int] | None = None,
           delay_s: float = 0.0, finish_reason: str | None = "stop") -> Reply:
    """The model answers in text (`reasoning` is sent as vLLM/DeepSeek's `reasoning_content`); `finish_reason`
    "length" is an answer the server cut at max_tokens."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return Reply(body=completion(message, finish_reason, tokens), delay_s=delay_s)


def tool_calls(*calls: tuple[str, dict[str, Any] | str], content: str | None = None,
               tokens: dict[str, int] | None = None, finish_reason: str | None = "tool_calls") -> Reply:
    """The model calls tools: (name, arguments) pairs; a str is sent verbatim as the arguments (malformed JSON,
    e.g. cut off at max_tokens with `finish_reason="length"`)."""
    wire = [{"id": f"call_{time.monotonic_ns()}_{i}", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]
    message = {"role": "assistant", "content": content, "tool_calls": wire}
    return Reply(body=completion(message, finish_reason, tokens))


def error(status: int, message: str = "scripted error", *, headers: dict[str, str] | None = None,
          delay_s: float = 0.0) -> Reply:
    """An error response with the OpenAI error body."""
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return Reply(status, {"error": {"message": message, "type": kind, "param": None, "code": None}},
                 headers or {}, delay_s)


OVERFLOW_BODIES: dict[str, tuple[int, dict[str, Any]]] = {
    # vLLM's old error body, and its newer {"error": {...}} one with "your request has N input tokens"
    "vllm": (400, {"object": "error", "message": "This model's maximum context length is 1500 tokens. However, you "
                   "requested 2647 tokens (1623 in the messages, 1024 in the completion). Please reduce the length of "
                   "the messages or completion.", "type": "BadRequestError", "param": None, "code": 400}),
    "vllm_new": (400, {"error": {"message": "This model's maximum context length is 1500 tokens. However, your request "
                                 "has 2647 input tokens. Please reduce the length of the input messages. None",
                                 "type": "BadRequestError", "param": None, "code": 400}}),
    "vllm_max_tokens": (400, {"error": {"message": "'max_tokens' or 'max_completion_tokens' is too large: 1024. This "
                                        "model's maximum context length is 1500 tokens and your request has 1000 input "
                                        "tokens (1024 > 1500 - 1000). None", "type": "BadRequestError", "param": None,
                                        "code": 400}}),
    "vllm_v1": (400, {"error": {"message": "The decoder prompt (length 2647) is longer than the maximum model length of "
                                "1500. Make sure that `max_model_len` is no smaller than the number of text tokens.",
                                "type": "BadRequestError", "param": None, "code": 400}}),
    "openai": (400, {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                               "resulted in 9000 tokens. Please reduce the length of the messages.",
                               "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    "sglang": (400, {"object": "error", "message": "The input (2647 tokens) is longer than the model's context length "
                     "(1500 tokens).", "type": "BadRequestError", "param": None, "code": 400}),
    "llama_cpp": (400, {"error": {"code": 400, "message": "request (2647 tokens) exceeds the available context size "
                                  "(1500 tokens)", "type": "exceed_context_size_error", "n_prompt_tokens": 2647,
                                  "n_ctx": 1500}}),
    "llama_cpp_python": (400, {"error": {"message": "This model's maximum context length is 512 tokens. However, you "
                                         "requested 3024 tokens (3008 in the messages, 16 in the completion). Please "
                                         "reduce the length of the messages or completion.",
                                         "type": "invalid_request_error", "param": "messages",
                                         "code": "context_length_exceeded"}}),
    "ollama": (400, {"error": {"message": "the input length exceeds the context length", "type": "api_error",
                               "param": None, "code": None}}),
    "tgi": (422, {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 1500. Given: 1623 "
                  "`inputs` tokens and 1024 `max_new_tokens`", "error_type": "validation"}),
    "tgi_inputs": (422, {"error": "Input validation error: `inputs` must have less than 1500 tokens. Given: 2647",
                         "error_type": "validation"}),
}
"""How each server refuses a conversation longer than the model's context, status and body as it sends them."""


def overflow(server: str = "vllm") -> Reply:
    """`server`'s refusal of a request that does not fit the model's context window (`OVERFLOW_BODIES`)."""
    status, body = OVERFLOW_BODIES[server]
    return Reply(status, body)


UNREADABLE_CALL_SAID = ("Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at "
                        "line 1, column 65: syntax error while parsing value - invalid literal; last read: "
                        "'\"P-92941\"}}.'; expected end of input")
"""llama-server's words when its parser could not read the call Qwen2.5-Coder-0.5B wrote (a period after the JSON),
as a run of it recorded them."""


def unreadable_call(said: str = UNREADABLE_CALL_SAID) -> Reply:
    """llama-server's answer to a request whose reply is a tool call its parser cannot read: HTTP 500 in its error
    body, the reply itself not sent."""
    return Reply(500, {"error": {"code": 500, "message": said, "type": "server_error"}})


def _unreadable_history_call(body: dict[str, Any]) -> Reply | None:
    """As llama-server and vLLM read a request: they parse the arguments of every call in its history to render the
    chat template, and answer HTTP 500 when those are not JSON (llama-server in the words it uses for a generated
    call it cannot read)."""
    for message in body.get("messages") or []:
        for call in message.get("tool_calls") or [] if isinstance(message, dict) else []:
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str) and arguments.strip():
                try:
                    json.loads(arguments)
                except json.JSONDecodeError as e:
                    return unreadable_call(f"Failed to parse tool call arguments as JSON: [json.exception.parse_error"
                                           f".101] parse error at line {e.lineno}, column {e.colno}: syntax error")
    return None


def written_call(name: str, arguments: dict[str, Any], fmt: str = "hermes") -> str:
    """A tool call as a model writes it in its chat format, which a server without a tool parser returns as text;
    `functions` is llama-cpp-python's chatml-function-calling syntax, HTML-escaped as that server returns it."""
    args = json.dumps(arguments)
    return {
        "hermes": f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>',
        "llama3_json": f'{{"name": "{name}", "parameters": {args}}}',
        "mistral": f'[TOOL_CALLS] [{{"name": "{name}", "arguments": {args}}}]',
        "function": f"<function={name}>{args}</function>",
        "functions": f"functions.{name}:\n{args.replace(chr(34), '&#34;')}",
    }[fmt]


class ChatServer:
    """The scripted server's state: the script, the default policy, and what it received and sent.

    Tests call `push(...)` to script replies and read `requests` (bodies), `headers` and `sent`
    (the successful bodies returned). Thread-safe: the server runs on its own thread and loop.

    Two settings make the default policy behave as served models do: `context_chars`, a context window (in
    characters of the request's messages and tools) past which a request is refused with `overflow_server`'s
    refusal, and within which a reply's usage counts the request's prompt (4 characters a token); `text_tool_calls`, a format in which tool calls come back as text, as from a server without a tool
    parser (vLLM without `--tool-call-parser`).

    Three make it serve as a loaded server does: `generate_s`, the seconds every reply takes to write (on top of a
    scripted reply's `delay_s`); `slots`, how many requests it works on at once, as llama.cpp's `--parallel` (the
    others wait their turn; None: all at once); `timings`, whether each answer carries llama.cpp's `timings`, the
    time it spent in its slot.
    """

    def __init__(self) -> None:
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.sent: list[dict[str, Any]] = []
        self.base_url = ""
        """`http://127.0.0.1:PORT/v1` once serving."""
        self.context_chars: int | None = None
        self.overflow_server = "vllm"
        self.text_tool_calls: str | None = None
        self.generate_s = 0.0
        self.slots: int | None = None
        self.timings = False
        self._gate: tuple[int, asyncio.Semaphore] | None = None
        """The slots' semaphore, made on the server's loop for the `slots` it was made for."""

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.headers.clear()
            self.sent.clear()
            self.context_chars = self.text_tool_calls = None
            self.overflow_server = "vllm"
            self.generate_s, self.slots, self.timings = 0.0, None, False

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat-completions requests received (not the model listings)."""
        return [r for r in self.requests if "messages" in r]

    @property
    def completion_requests(self) -> list[dict[str, Any]]:
        """Bodies of the text-completions requests received."""
        return [r for r in self.requests if "prompt" in r]

    def _next(self, body: dict[str, Any]) -> Reply:
        if unreadable := _unreadable_history_call(body):
            return unreadable
        with self._lock:
            if self._script:
                return self._script.popleft()
        seen = json.dumps(body.get("messages") or body.get("prompt")) + json.dumps(body.get("tools") or [])
        if self.context_chars is not None and len(seen) > self.context_chars:
            return overflow(self.overflow_server)
        reply = default_reply(body)
        if self.context_chars is not None and isinstance(reply.body, dict):
            # A served model's usage counts its prompt (here about 4 characters a token): tool results sent back
            # make the next request's prompt larger, as they do for a model that sees them.
            reply.body["usage"] = usage(prompt=len(seen) // 4)
        calls = reply.body["choices"][0]["message"].get("tool_calls") if isinstance(reply.body, dict) else None
        if calls and self.text_tool_calls:  # no tool parser: the call comes back as the model wrote it
            function = calls[0]["function"]
            return answer(written_call(function["name"], json.loads(function["arguments"]), self.text_tool_calls))
        return reply

    async def chat(self, request: Request) -> Response:
        return await self._respond(request, chat=True)

    async def complete(self, request: Request) -> Response:
        return await self._respond(request, chat=False)

    async def _respond(self, request: Request, *, chat: bool) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        reply = self._next(body)
        async with self._slot():
            t0 = time.perf_counter()
            if reply.delay_s or self.generate_s:
                await asyncio.sleep(reply.delay_s + self.generate_s)
            in_slot_ms = (time.perf_counter() - t0) * 1000
        if isinstance(reply.body, Text):
            said_ = reply.body
            message = {"role": "assistant", "content": said_.text, "tool_calls": None}
            body = completion(message, said_.finish_reason, said_.tokens) if chat else \
                text_completion(said_.text, said_.finish_reason, said_.tokens)
            body["choices"][0].update(said_.stop_field)
            reply = Reply(reply.status, body, reply.headers)
        if isinstance(reply.body, str):
            return PlainTextResponse(reply.body, reply.status, headers=reply.headers)
        if reply.status == 200 and isinstance(reply.body, dict):
            if self.timings:  # as llama.cpp's server reports them: its prompt and generation time in the slot
                completion_tokens = (reply.body.get("usage") or {}).get("completion_tokens", 0)
                reply = Reply(reply.status, {**reply.body, "timings": {
                    "prompt_n": 0, "prompt_ms": 0.0, "predicted_n": completion_tokens, "predicted_ms": in_slot_ms}},
                    reply.headers)
            with self._lock:
                self.sent.append(reply.body)
        return JSONResponse(reply.body, reply.status, headers=reply.headers)

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """One of the `slots`, waited for; nothing to wait for without them."""
        if self.slots is None:
            return contextlib.nullcontext()
        if self._gate is None or self._gate[0] != self.slots:
            self._gate = (self.slots, asyncio.Semaphore(self.slots))
        return self._gate[1]

    async def models(self, request: Request) -> Response:
        with self._lock:
            self.requests.append({"_models": True})
            self.headers.append(dict(request.headers))
        return JSONResponse({"object": "list", "data": [
            {"id": MODEL, "object": "model", "created": 0, "owned_by": "tests"}]})

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.complete, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
        ])


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def default_reply(body: dict[str, Any]) -> Reply:
    """The unscripted policy (see the module docstring)."""
    if "prompt" in body or ("stop" in body and not body.get("tools")):
        seen = body.get("prompt") or "".join(_text(m.get("content")) for m in body.get("messages") or [])
        return search_r1_reply(str(seen))
    messages = body.get("messages") or []
    tool_results = [m for m in messages if m.get("role") == "tool"]
    tool = query_tool(body.get("tools") or [])
    if tool is not None and not tool_results and body.get("tool_choice") != "none":
        question = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        return tool_calls((tool, {"query": question}))
    if tool_results:
        lines = [line.strip() for line in _text(tool_results[-1].get("content")).splitlines() if line.strip()]
        return answer(lines[0] if lines else "I don't know.")
    return answer("I don't know.")


_QUESTION = re.compile(r"Question: (.*)\n")
_FIRST_TITLE = re.compile(r"<information>Doc 1\(Title: ([^)\n]*)\)")


def search_r1_reply(seen: str) -> Reply:
    """Search-R1-shaped text for what the model has seen so far (the prompt and its own text)."""
    titles = _FIRST_TITLE.findall(seen)
    if titles:
        return said(f"<think>The passage names it.</think>\n<answer> {titles[-1]} ", stop="</answer>")
    found = _QUESTION.search(seen)
    question = found.group(1).strip() if found else "the question"
    return said(f"<think>I need to search.</think>\n<search> {question} ", stop="</search>")


@contextlib.contextmanager
def chat_server() -> Iterator[ChatServer]:
    """Serve a `ChatServer` on a free loopback port; its `base_url` ends in `/v1`."""
    state = ChatServer()
    uv = uvicorn.Server(uvicorn.Config(state.app(), log_level="warning", timeout_graceful_shutdown=1))
    with serving(uv, bind_socket("127.0.0.1", 0)) as base:
        state.base_url = f"{base}/v1"
        yield state
