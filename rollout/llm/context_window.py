"""When a conversation outgrows the model's context window: the servers' refusals, and the check before sending.

An agent whose conversation no longer fits has met its own limit, as one that runs out of turns has: the task ends
as the agent's outcome (status ok, flagged `out_of_context`, scored), never as an infrastructure error that would
drop it from the metrics. Two ways get there:

- the server refuses the request (`is_context_overflow` recognises each server's documented text or code, and
  `ChatClient` raises `ContextWindowExceeded` carrying the server's own message);
- with `llm.context_window` set, `ContextBudget` finds the request cannot fit before it is sent: the prompt counted
  with the model's tokenizer (`agent.tokenizer`) or estimated (`ESTIMATE_CHARS_PER_TOKEN`), plus the completion's
  `max_tokens`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.errors import ConfigError, ContextWindowExceeded, RetrievalError

OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error", "context_window_exceeded"})
"""Error codes or types that mean the request does not fit: OpenAI's and llama-cpp-python's `code`
(`context_length_exceeded`), llama.cpp's server's `type` (`exceed_context_size_error`)."""

OVERFLOW_TEXTS = re.compile("|".join((
    # vLLM (old and new bodies), OpenAI, llama-cpp-python: "This model's maximum context length is N tokens. However,
    # you requested M tokens ..." / "... and your request has M input tokens (X > N - M)"
    r"maximum context length",
    # vLLM v1: "The decoder prompt (length N) is longer than the maximum model length of M" / "Prompt length of N is
    # longer than the maximum model length of M"
    r"longer than the maximum model length",
    # SGLang: "The input (N tokens) is longer than the model's context length (M tokens)"
    r"longer than the model's context length",
    # llama.cpp's server: "request (N tokens) exceeds the available context size (M tokens)"
    r"exceeds the available context size",
    # Ollama: "the input length exceeds the context length"
    r"input length exceeds the context length",
    # TGI (HTTP 422): "`inputs` tokens + `max_new_tokens` must be <= N" / "`inputs` must have less than N tokens"
    r"`inputs` tokens \+ `max_new_tokens` must be <=",
    r"`inputs` must have less than \d+ tokens",
    # OpenAI's Responses-era text
    r"exceeds the context window",
)), re.IGNORECASE)
"""The servers' documented texts for a request that does not fit the model's context window."""

OVERFLOW_STATUSES = frozenset({400, 413, 422})
"""HTTP statuses a server refuses an over-long request with (vLLM, OpenAI, SGLang, llama.cpp: 400; TGI: 422)."""

ESTIMATE_CHARS_PER_TOKEN = 4.0
"""Without `agent.tokenizer`, a prompt's tokens are estimated as its characters / 4 (English text in BPE
vocabularies averages about 4 characters a token), plus `MESSAGE_OVERHEAD_TOKENS` per message."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat template adds around each message (role markers and separators), counted either way."""

LARGER_CONTEXT = "give the model a larger context (vLLM --max-model-len, SGLang --context-length, llama.cpp --ctx-size)"
FIX = (f"{LARGER_CONTEXT} or keep conversations shorter: a smaller agent.max_turns, agent.top_k / "
       "gateway.default_top_k, or llm.sampling.max_tokens")
"""What to change when tasks end out of context, in the run's console line."""
OWN_OUTPUT_FIX = (f"cap the model's replies with a smaller llm.sampling.max_tokens (e.g. 512; a model that writes "
                  f"until its window is full stops there instead), or {LARGER_CONTEXT}")
"""What to change when the model's own output filled its context (`rollout.report.context_overflow`): its replies,
not the tools' results, grew the conversation, or its completion budget took the room."""

_WINDOW_TEXTS = re.compile("|".join((
    r"maximum context length is (\d+)",  # vLLM, OpenAI, llama-cpp-python
    r"maximum model length of (\d+)",  # vLLM v1
    r"model's context length \((\d+) tokens\)",  # SGLang
    r"available context size \((\d+) tokens\)",  # llama.cpp's server
    r"`max_new_tokens` must be <= (\d+)",  # TGI
    r"llm\.context_window=(\d+)",  # ContextBudget's own
)), re.IGNORECASE)
_BUDGET_TEXTS = (
    # vLLM's old body, llama-cpp-python: "(1623 in the messages, 1024 in the completion)"
    re.compile(r"(?P<prompt>\d+) in the messages, (?P<completion>\d+) in the completion"),
    # vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 1024. ... your request has 1000 input tokens"
    re.compile(r"too large: (?P<completion>\d+)\..*?request has (?P<prompt>\d+) input tokens", re.DOTALL),
    # TGI: "Given: 1623 `inputs` tokens and 1024 `max_new_tokens`"
    re.compile(r"Given: (?P<prompt>\d+) `inputs` tokens and (?P<completion>\d+) `max_new_tokens`"),
    # ContextBudget's own: "(1400 in the prompt, estimated ...; 1024 for the completion)"
    re.compile(r"\((?P<prompt>\d+) in the prompt, [^;]*; (?P<completion>\d+) for the completion\)"),
)


def window_in(message: str | None) -> int | None:
    """The context window (tokens) a refusal names, when its text names one (`stop_message`)."""
    found = _WINDOW_TEXTS.search(message or "")
    return None if found is None else int(next(g for g in found.groups() if g is not None))


def budget_in(message: str | None) -> tuple[int, int] | None:
    """The prompt's and the completion's tokens a refusal names, when its text splits the request so (vLLM,
    llama-cpp-python, TGI and `ContextBudget` do)."""
    for pattern in _BUDGET_TEXTS:
        if found := pattern.search(message or ""):
            return int(found["prompt"]), int(found["completion"])
    return None


def is_context_overflow(status: int, body: Any) -> bool:
    """Whether an HTTP error response (`status`, its JSON body or text) is a server's context-window refusal."""
    if status not in OVERFLOW_STATUSES:
        return False
    inner = body.get("error", body) if isinstance(body, Mapping) else body
    if isinstance(inner, Mapping):
        if str(inner.get("code") or "") in OVERFLOW_CODES or str(inner.get("type") or "") in OVERFLOW_CODES:
            return True
        text = str(inner.get("message") or inner.get("detail") or inner.get("error") or "")
    else:  # a text body, or an {"error": "..."} one (TGI, Ollama)
        text = str(inner or "")
    return bool(OVERFLOW_TEXTS.search(text))


def max_completion_tokens(sampling: Mapping[str, Any]) -> int:
    """The completion budget a request asks for (`max_completion_tokens` or `max_tokens`; 0 when unset)."""
    value = sampling.get("max_completion_tokens", sampling.get("max_tokens"))
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


class ContextBudget:
    """Whether a request fits `llm.context_window`: its prompt's tokens plus the completion's `max_tokens`.

    With a tokenizer (`rollout.llm.token_count.TokenCounter` of `agent.tokenizer`) the prompt is the messages'
    text and the tools' JSON counted in the model's tokens; without one it is estimated from their characters. Either
    way each message adds `MESSAGE_OVERHEAD_TOKENS` for the template's markers."""

    def __init__(self, window: int, tokenizer: str | None = None) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"llm.context_window={window!r} must be the model's context length in tokens "
                              "(e.g. llm.context_window=32768), or null to leave the check to the server")
        self.window = window
        self.tokenizer = tokenizer
        self._counter: Any = None
        if tokenizer is not None:
            from rollout.llm.token_count import load_token_counter  # the retrieval package only when asked

            try:
                self._counter = load_token_counter(tokenizer)
            except RetrievalError as e:
                raise ConfigError(str(e).replace("tokenizer=", "agent.tokenizer=", 1)) from e

    @property
    def method(self) -> str:
        return f"counted with {self.tokenizer}" if self._counter is not None else "estimated at 4 characters a token"

    def tokens(self, text: str) -> int:
        if self._counter is not None:
            return self._counter.count(text)
        return math.ceil(len(text) / ESTIMATE_CHARS_PER_TOKEN)

    def prompt_tokens(self, messages: Sequence[Mapping[str, Any]] | str,
                      tools: Sequence[Mapping[str, Any]] | None = None) -> int:
        """The prompt's tokens: a text prompt as is, chat messages' contents (and tool calls) each with their
        overhead, and the offered tools' schemas as JSON."""
        if isinstance(messages, str):
            return self.tokens(messages)
        total = 0
        for m in messages:
            text = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content") or "")
            calls = m.get("tool_calls")
            total += self.tokens(text + (json.dumps(calls) if calls else "")) + MESSAGE_OVERHEAD_TOKENS
        if tools:
            total += self.tokens(json.dumps(list(tools)))
        return total

    def check(self, messages: Sequence[Mapping[str, Any]] | str, tools: Sequence[Mapping[str, Any]] | None,
              sampling: Mapping[str, Any]) -> None:
        """Raise `ContextWindowExceeded` (no request made) when the prompt plus the completion's budget would pass
        the window."""
        prompt = self.prompt_tokens(messages, tools)
        completion = max_completion_tokens(sampling)
        if prompt + completion > self.window:
            raise ContextWindowExceeded(
                f"the next request would need {prompt + completion} tokens ({prompt} in the prompt, {self.method}; "
                f"{completion} for the completion), over llm.context_window={self.window}: not sent")
