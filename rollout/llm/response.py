"""What an agent loop reads of an endpoint's answer: a `Completion` parsed from a chat completion (with the tool
calls the model asked for) or from a text completion (`agent.wire=completions`).

A body that is not a completion of the kind asked for is an `LLMError` naming `llm.base_url`: retrying would get
the same body.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.errors import LLMError

CHAT_ENDPOINT = "/chat/completions"
TEXT_ENDPOINT = "/completions"


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call as the model wrote it (arguments still the raw JSON string)."""

    id: str
    name: str
    arguments: str
    type: str = "function"


@dataclass(frozen=True, slots=True)
class Completion:
    """The parts of a chat completion (or a text completion: `content` is its text) an agent loop needs."""

    content: str | None
    reasoning: str | None
    """`reasoning_content` (vLLM, DeepSeek) or `reasoning` when the endpoint returns one."""
    tool_calls: list[ToolCallRequest]
    finish_reason: str | None
    """Why the endpoint stopped (`stop`, `length`, `tool_calls`, `content_filter`...), as sent; None when absent."""
    usage: dict[str, int] | None
    latency_ms: float
    """Wall time of the request, retries and waits included."""
    attempts: int
    stop: str | None = None
    """The stop string that ended the reply, when the server names it (vLLM's `stop_reason`, SGLang's
    `matched_stop`); None otherwise."""
    names_stop: bool = False
    """Whether the server said what ended the reply (vLLM and SGLang do; OpenAI does not). With `stop` None it was
    then no stop string (the end-of-sequence token, or the token limit)."""
    sent: float | None = None
    """Unix time the answered attempt was sent."""
    request_ms: float | None = None
    """Wall time of the answered attempt alone, from sending it to its parsed response (`latency_ms` adds the
    failed attempts and the waits between)."""
    server_ms: float | None = None
    """Time the server says it spent on the request, prompt and generation (llama.cpp's `timings`: prompt_ms +
    predicted_ms); the rest of `request_ms` it was queued (or on the wire). None when the server does not say."""


def not_a_completion(base_url: str, what: str, endpoint: str = CHAT_ENDPOINT) -> str:
    """The message of an answer that is not a completion of the kind `endpoint` gives, naming the fix."""
    kind = "a text completion" if endpoint == TEXT_ENDPOINT else "a chat completion"
    return (f"{base_url} did not answer with {kind} ({what}); llm.base_url must be an "
            f"OpenAI-compatible API root whose {endpoint} endpoint answers (usually ending in /v1)")


def chat_completion(response: Any, base_url: str, endpoint: str, latency_ms: float, attempts: int) -> Completion:
    """The `Completion` of a chat-completions response: its first choice's message and tool calls."""
    choice = _first_choice(response, base_url, endpoint)
    message = getattr(choice, "message", None)
    if message is None:
        raise LLMError(not_a_completion(base_url, "the first choice has no message", endpoint))
    extra = getattr(message, "model_extra", None) or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    calls = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        calls.append(ToolCallRequest(
            # Some servers omit ids; the tool message must still name its call, uniquely in the conversation.
            id=getattr(call, "id", None) or f"call_{uuid.uuid4().hex[:12]}_{i}",
            name=str(getattr(function, "name", "") or ""),
            arguments=str(getattr(function, "arguments", "") or ""),
            type=str(getattr(call, "type", "function") or "function"),
        ))
    return Completion(
        content=getattr(message, "content", None),
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        tool_calls=calls,
        finish_reason=_finish_reason(choice),
        usage=_usage(response),
        latency_ms=latency_ms,
        attempts=attempts,
        **_stop(choice),
    )


def text_completion(response: Any, base_url: str, endpoint: str, latency_ms: float, attempts: int) -> Completion:
    """The `Completion` of a text-completions response: its first choice's text as `content`, no tool calls."""
    choice = _first_choice(response, base_url, endpoint)
    text = getattr(choice, "text", None)
    if not isinstance(text, str):
        raise LLMError(not_a_completion(base_url, "the first choice has no text", endpoint))
    return Completion(content=text, reasoning=None, tool_calls=[], finish_reason=_finish_reason(choice),
                      usage=_usage(response), latency_ms=latency_ms, attempts=attempts, **_stop(choice))


def server_ms(response: Any) -> float | None:
    """What the server says it spent on the request: llama.cpp's server adds `timings` (prompt_ms, predicted_ms)
    to each response; None from servers that do not (vLLM, SGLang, OpenAI, llama-cpp-python)."""
    timings = (getattr(response, "model_extra", None) or {}).get("timings")
    if not isinstance(timings, Mapping):
        return None
    try:
        return float(timings["prompt_ms"]) + float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError):
        return None


def _first_choice(response: Any, base_url: str, endpoint: str) -> Any:
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        shown = response if isinstance(response, str) else getattr(response, "model_extra", None) or response
        raise LLMError(not_a_completion(base_url, f"no choices in {str(shown)[:200]!r}", endpoint))
    return choices[0]


def _finish_reason(choice: Any) -> str | None:
    return None if (reason := getattr(choice, "finish_reason", None)) is None else str(reason)


def _usage(response: Any) -> dict[str, int] | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    return {k: int(getattr(usage, k, 0) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _stop(choice: Any) -> dict[str, Any]:
    """`stop` and `names_stop` of a choice: vLLM sends `stop_reason` (the stop string, a stop token id, or null at
    the end-of-sequence token), SGLang `matched_stop` (the string or the token id)."""
    extra = getattr(choice, "model_extra", None) or {}
    for key in ("stop_reason", "matched_stop"):
        if key in extra:
            value = extra[key]
            return {"stop": value if isinstance(value, str) else None, "names_stop": True}
    return {"stop": None, "names_stop": False}
