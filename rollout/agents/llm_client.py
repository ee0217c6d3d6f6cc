"""One chat-completions (or text-completions) request at a time, with explicit, bounded retries.

The `openai` SDK's own retries are off (`max_retries=0`): retrying here keeps the policy visible in
config and testable. A request is retried on 408, 429 (after its `Retry-After`, capped), 5xx,
connection errors and timeouts, with exponential backoff and full jitter, at most
`llm.max_retries` times. Anything else — 400, 401, 403, 404, 422, a body that is not a chat
completion — is deterministic: retrying would fail the same way, so it raises `LLMError` at once
with what to fix. Every attempt is bounded by `llm.timeout_s` and every wait by a cap, so a request
always ends. `ChatClient.complete` posts to `/chat/completions`, `ChatClient.complete_text` to
`/completions` (a prompt the caller built, for agents that write plain text); both share the policy.

Every timeout, retry and answer slower than `SLOW_CALL_S` is a warning line (`rollout.agents.llm_trouble`: a run
shows the first few and counts the rest), and every answer says when its attempt was sent and how long it took,
and how long the server says it worked on it, for the summary's measure of the endpoint (`rollout.report.endpoint`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

try:
    import openai
except ImportError:  # only agent=openai needs it; ChatClient names the install line instead of failing at import
    openai = None  # type: ignore[assignment]

from rollout.agents.context_window import ContextBudget, is_context_overflow
from rollout.agents.llm_trouble import SLOW_CALL_S, gave_up_line, retry_line, slow_line
from rollout.agents.sampling_keys import SDK_PARAMS, TEXT_SDK_PARAMS, check_sampling_keys
from rollout.errors import ConfigError, ContextWindowExceeded, LLMError

logger = logging.getLogger(__name__)

NO_KEY = "EMPTY"
"""Sent when the key's environment variable is unset: local servers (vLLM, SGLang, Ollama) need none."""

_RETRYABLE_STATUS = frozenset({408, 429})


def plain(config: Any) -> Any:
    """A Hydra config (`DictConfig`, `ListConfig`) as plain containers (hydra's `instantiate` hands nested configs
    over as such)."""
    return OmegaConf.to_container(config, resolve=True) if isinstance(config, Container) else config


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """The `llm:` block of the config, checked."""

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_retries: int = 5
    sampling: dict[str, Any] = field(default_factory=dict)
    price_prompt: float | None = None
    """USD per million prompt tokens."""
    price_completion: float | None = None
    """USD per million completion tokens."""
    context_window: int | None = None
    """The model's context length in tokens: a request whose prompt plus `max_tokens` would pass it is not sent
    (`rollout.agents.context_window`); None leaves the check to the server."""

    @classmethod
    def from_config(cls, llm: Mapping[str, Any] | DictConfig | None, agent: str = "openai") -> LLMSettings:
        """Check the block; a missing or wrong value is a `ConfigError` naming the key to set (and `agent`, the
        agent that needs it)."""
        c = plain(llm) or {}
        if not isinstance(c, Mapping):
            raise ConfigError(f"agent={agent} needs an llm: block (base_url, model, ...), got {c!r}")
        model = c.get("model")
        if not model or not isinstance(model, str):
            raise ConfigError(f"agent={agent} needs llm.model=NAME (the model the endpoint serves, "
                              "e.g. llm.model=Qwen/Qwen2.5-7B-Instruct)")
        base_url = c.get("base_url")
        if not base_url or not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"llm.base_url={base_url!r} must be the endpoint's http(s) URL, "
                              "e.g. llm.base_url=http://127.0.0.1:8000/v1")
        prices = c.get("prices") or {}
        sampling = c.get("sampling") or {}
        if not isinstance(prices, Mapping) or not isinstance(sampling, Mapping):
            raise ConfigError("llm.prices and llm.sampling must be mappings")
        check_sampling_keys(sampling)
        try:
            settings = cls(
                base_url=base_url.rstrip("/"),
                model=model,
                api_key_env=c.get("api_key_env") or None,
                timeout_s=float(c.get("timeout_s", 120.0)),
                max_retries=int(c.get("max_retries", 5)),
                sampling={str(k): v for k, v in sampling.items() if v is not None},
                price_prompt=_price(prices.get("prompt")),
                price_completion=_price(prices.get("completion")),
                context_window=c.get("context_window"),
            )
        except (TypeError, ValueError) as e:
            raise ConfigError(f"llm: {e} (timeout_s, max_retries and prices are numbers)") from e
        if settings.timeout_s <= 0:
            raise ConfigError(f"llm.timeout_s={settings.timeout_s:g} must be positive")
        if settings.max_retries < 0:
            raise ConfigError(f"llm.max_retries={settings.max_retries} must be 0 or more")
        return settings

    def api_key(self) -> str:
        return (os.environ.get(self.api_key_env) if self.api_key_env else None) or NO_KEY

    def cost_usd(self, usage: Mapping[str, float]) -> float | None:
        """The price of `usage`, when both prices are configured."""
        if self.price_prompt is None or self.price_completion is None:
            return None
        return (usage.get("prompt_tokens", 0) * self.price_prompt
                + usage.get("completion_tokens", 0) * self.price_completion) / 1e6

    def priced(self, usage: Mapping[str, float]) -> dict[str, float]:
        """`usage` with its `cost_usd` added when both prices are configured and there is usage."""
        cost = self.cost_usd(usage)
        return {**usage, "cost_usd": cost} if cost is not None and usage else dict(usage)


def _price(value: Any) -> float | None:
    if value is None:
        return None
    price = float(value)
    if price < 0:
        raise ValueError(f"price {price:g} is negative")
    return price


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait before retry number `n` (0-based): full jitter over a capped exponential."""

    max_retries: int
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0
    """A server's `Retry-After` is honoured up to this; a longer ask is cut to it."""

    @classmethod
    def from_config(cls, max_retries: int, backoff_base_s: Any = 0.5, backoff_max_s: Any = 30.0,
                    retry_after_max_s: Any = 60.0) -> RetryPolicy:
        """The agent's retry waits (`agent.backoff_base_s`, ...), checked: a bad one is a `ConfigError` naming it."""
        delays = {"backoff_base_s": backoff_base_s, "backoff_max_s": backoff_max_s,
                  "retry_after_max_s": retry_after_max_s}
        for key, value in delays.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"agent.{key}={value!r} must be a number of seconds, 0 or more")
        return cls(max_retries, float(backoff_base_s), float(backoff_max_s), float(retry_after_max_s))

    def delay(self, n: int, retry_after_s: float | None, rng: random.Random) -> float:
        if retry_after_s is not None:
            return max(0.0, min(retry_after_s, self.retry_after_max_s))
        return rng.uniform(0.0, min(self.backoff_max_s, self.backoff_base_s * 2.0 ** n))


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


@dataclass(frozen=True, slots=True)
class _Failure:
    """One failed attempt, classified."""

    retryable: bool
    description: str
    retry_after_s: float | None = None
    error: type[LLMError] = LLMError
    """What a failure that is not retried raises."""
    timeout: bool = False
    """The attempt got no response within its time."""


class ChatClient:
    """Chat-completions requests to one endpoint with the retry policy above.

    The `AsyncOpenAI` client is made on first use inside the running event loop (an httpx client
    belongs to the loop it was made in) and remade if a later call runs in another loop, e.g. after
    a preflight `asyncio.run` in the driver.
    """

    def __init__(self, settings: LLMSettings, retry: RetryPolicy, rng: random.Random | None = None,
                 tokenizer: str | None = None, slow_call_s: float = SLOW_CALL_S) -> None:
        if openai is None:
            raise ConfigError("an LLM agent (agent=openai, agent=tagged) needs the openai package: pip install openai")
        self.settings = settings
        self.retry = retry
        self.budget = None if settings.context_window is None else ContextBudget(settings.context_window, tokenizer)
        """Checks each request against `llm.context_window` before it is sent (`agent.tokenizer` counts)."""
        self._rng = rng or random.Random()
        self.slow_call_s = slow_call_s
        """An answer whose attempt took longer than this is logged as slow."""
        self._client: openai.AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _openai(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = openai.AsyncOpenAI(
                api_key=self.settings.api_key(), base_url=self.settings.base_url,
                timeout=self.settings.timeout_s, max_retries=0,
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.close()
        self._client = self._loop = None

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        parallel_tool_calls: bool | None = None,
        sampling: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Completion:
        """One chat completion, retried per the policy; `LLMError` when it is refused or retries run out.

        `sampling` replaces `llm.sampling` key by key; `extra_body` adds keys to the request body (e.g. vLLM's
        `continue_final_message`); `max_retries` and `timeout_s` override the configured budget (the preflight
        uses a short one).
        """
        timeout = timeout_s or self.settings.timeout_s
        if self.budget is not None:
            self.budget.check(messages, tools, {**self.settings.sampling, **(sampling or {})})
        kwargs = self._request({"messages": messages}, sampling, extra_body, timeout, SDK_PARAMS)
        self._add_tools(kwargs, tools, tool_choice, parallel_tool_calls)
        return await self._retrying(lambda: self._openai().chat.completions.create(**kwargs), self._parse,
                                    "/chat/completions", max_retries, timeout)

    async def complete_text(
        self,
        prompt: str,
        *,
        sampling: Mapping[str, Any] | None = None,
        max_retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Completion:
        """One text completion of `prompt` (`POST /completions`), retried as `complete` is; the text is the
        `Completion`'s `content`."""
        timeout = timeout_s or self.settings.timeout_s
        if self.budget is not None:
            self.budget.check(prompt, None, {**self.settings.sampling, **(sampling or {})})
        kwargs = self._request({"prompt": prompt}, sampling, None, timeout, TEXT_SDK_PARAMS)
        return await self._retrying(lambda: self._openai().completions.create(**kwargs), self._parse_text,
                                    "/completions", max_retries, timeout)

    async def preflight(self, agent: str, *, text: bool = False, max_retries: int = 2, timeout_s: float = 30.0) -> None:
        """One tiny request (one output token, a short retry budget) on the wire the agent uses — `/completions`
        when `text` — so a wrong URL, key or model fails the run in seconds: `LLMError` naming `agent` and the
        fix. The client is closed after, as the preflight runs in its own event loop."""
        # Keep the token-limit key the config uses (OpenAI's reasoning models refuse `max_tokens`).
        limit = "max_completion_tokens" if "max_completion_tokens" in self.settings.sampling else "max_tokens"
        budget = {"sampling": {limit: 1}, "max_retries": min(max_retries, self.settings.max_retries),
                  "timeout_s": min(timeout_s, self.settings.timeout_s)}
        try:
            if text:
                await self.complete_text("Reply with OK.", **budget)
            else:
                await self.complete([{"role": "user", "content": "Reply with OK."}], **budget)
        except LLMError as e:
            raise LLMError(f"agent={agent} preflight (llm.model={self.settings.model}) failed: {e}") from e
        finally:
            await self.aclose()
        logger.debug("LLM endpoint %s answers for model %s", self.settings.base_url, self.settings.model)

    async def _retrying(
        self, create: Callable[[], Awaitable[Any]], parse: Callable[[Any, float, int, str], Completion],
        endpoint: str, max_retries: int | None, timeout: float,
    ) -> Completion:
        retries = self.retry.max_retries if max_retries is None else max_retries
        t0 = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            sent, t_sent = time.time(), time.perf_counter()
            try:
                async with asyncio.timeout(timeout):
                    response = await create()
            except (openai.APIError, TimeoutError) as e:
                failure = self._classify(e, timeout, endpoint)
                if not failure.retryable:
                    raise failure.error(failure.description) from e
                if attempt > retries:
                    if failure.timeout:  # other failures surface as the task's error alone
                        logger.warning("%s", gave_up_line(failure.description, attempts=attempt))
                    budget = f"; llm.max_retries={retries}" if max_retries is None else ""
                    raise LLMError(f"{failure.description} (gave up after {attempt} attempts{budget})") from e
            else:
                now = time.perf_counter()
                reply = parse(response, (now - t0) * 1000, attempt, endpoint)
                if now - t_sent > self.slow_call_s:
                    completion_tokens = (reply.usage or {}).get("completion_tokens")
                    logger.warning("%s", slow_line(now - t_sent, self.settings.base_url, completion_tokens,
                                                   self.slow_call_s))
                return replace(reply, sent=sent, request_ms=(now - t_sent) * 1000, server_ms=_server_ms(response))
            wait = self.retry.delay(attempt - 1, failure.retry_after_s, self._rng)
            logger.warning("%s", retry_line(failure.description, timeout=failure.timeout, retry=attempt,
                                            retries=retries, wait_s=wait))
            await asyncio.sleep(wait)

    def _request(self, body: dict[str, Any], sampling: Mapping[str, Any] | None, extra_body: Mapping[str, Any] | None,
                 timeout: float, named: frozenset[str]) -> dict[str, Any]:
        params = {**self.settings.sampling, **(sampling or {})}
        kwargs: dict[str, Any] = {"model": self.settings.model, **body, "timeout": timeout}
        extra = {k: v for k, v in params.items() if k not in named and v is not None}
        kwargs.update({k: v for k, v in params.items() if k in named and v is not None})
        extra.update(extra_body or {})
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    @staticmethod
    def _add_tools(kwargs: dict[str, Any], tools: list[dict[str, Any]] | None, tool_choice: str | None,
                   parallel_tool_calls: bool | None) -> None:
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
            if parallel_tool_calls is not None:
                kwargs["parallel_tool_calls"] = parallel_tool_calls

    def _classify(self, e: BaseException, timeout: float, endpoint: str) -> _Failure:
        where = f"{self.settings.base_url}"
        if isinstance(e, (TimeoutError, openai.APITimeoutError)):
            return _Failure(True, f"no response from {where} within {timeout:g} s (llm.timeout_s)", timeout=True)
        if isinstance(e, openai.APIConnectionError):
            cause = e.__cause__ or e
            return _Failure(True, f"could not connect to {where} ({type(cause).__name__}: {cause}): start your "
                                  "server there or set llm.base_url=URL (e.g. http://127.0.0.1:8000/v1)")
        if isinstance(e, openai.APIStatusError):
            status, detail = e.status_code, _detail(e)
            if is_context_overflow(status, e.body):  # the agent's limit, not the endpoint's fault: its own message
                return _Failure(False, _detail(e, limit=None), error=ContextWindowExceeded)
            if status in _RETRYABLE_STATUS or status >= 500:
                return _Failure(True, f"HTTP {status} from {where}: {detail}", _retry_after(e.response.headers))
            return _Failure(False, self._refusal(status, detail, endpoint))
        if isinstance(e, openai.APIResponseValidationError):
            return _Failure(False, self._not_chat(str(e), endpoint))
        return _Failure(False, f"{where}: {type(e).__name__}: {e}")

    def _refusal(self, status: int, detail: str, endpoint: str = "/chat/completions") -> str:
        """The message of a deterministic HTTP failure: what happened and what to change."""
        s = self.settings
        key = f"${s.api_key_env}" if s.api_key_env else "no key variable"
        key_state = (f"{key} (llm.api_key_env) is set" if s.api_key() != NO_KEY
                     else f"{key} (llm.api_key_env) is unset, so no key was sent")
        if status == 401:
            return (f"{s.base_url} refused the API key (HTTP 401: {detail}); {key_state}: "
                    f"set ${s.api_key_env or 'OPENAI_API_KEY'} to a valid key (llm.api_key_env names the variable)")
        if status == 403:
            return (f"{s.base_url} refused access to model {s.model} (HTTP 403: {detail}); "
                    f"check that the key in {key} may use it")
        if status == 404:
            text_only = ("; agent.wire=completions needs a server with /v1/completions (vLLM, SGLang), "
                         "agent.wire=chat uses /v1/chat/completions") if endpoint == "/completions" else ""
            return (f"model {s.model} not found at base_url {s.base_url} (HTTP 404: {detail}): check llm.model / "
                    f"llm.base_url (OpenAI-compatible servers serve under /v1, e.g. http://127.0.0.1:8000/v1){text_only}")
        what = ("" if endpoint == "/completions" else ", and that the server supports tool calling "
                "(vLLM: --enable-auto-tool-choice --tool-call-parser NAME)")
        return f"{s.base_url} rejected the request for model {s.model} (HTTP {status}: {detail}); check llm.sampling{what}"

    def _not_chat(self, what: str, endpoint: str = "/chat/completions") -> str:
        kind = "a text completion" if endpoint == "/completions" else "a chat completion"
        return (f"{self.settings.base_url} did not answer with {kind} ({what}); llm.base_url must be an "
                f"OpenAI-compatible API root whose {endpoint} endpoint answers (usually ending in /v1)")

    def _choice(self, response: Any, endpoint: str) -> Any:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            shown = response if isinstance(response, str) else getattr(response, "model_extra", None) or response
            raise LLMError(self._not_chat(f"no choices in {str(shown)[:200]!r}", endpoint))
        return choices[0]

    def _parse_text(self, response: Any, latency_ms: float, attempts: int, endpoint: str) -> Completion:
        choice = self._choice(response, endpoint)
        text = getattr(choice, "text", None)
        if not isinstance(text, str):
            raise LLMError(self._not_chat("the first choice has no text", endpoint))
        return Completion(content=text, reasoning=None, tool_calls=[], finish_reason=_finish_reason(choice),
                          usage=_usage(response), latency_ms=latency_ms, attempts=attempts, **_stop(choice))

    def _parse(self, response: Any, latency_ms: float, attempts: int, endpoint: str) -> Completion:
        choice = self._choice(response, endpoint)
        message = getattr(choice, "message", None)
        if message is None:
            raise LLMError(self._not_chat("the first choice has no message", endpoint))
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


def refused(e: LLMError) -> bool:
    """Whether the endpoint refused the request outright (an HTTP status that is not retried), so that the same
    request would be refused again, as opposed to not answering in time or failing on its side."""
    cause = e.__cause__
    return openai is not None and isinstance(cause, openai.APIStatusError) and cause.status_code < 500 \
        and cause.status_code not in _RETRYABLE_STATUS


def _finish_reason(choice: Any) -> str | None:
    return None if (reason := getattr(choice, "finish_reason", None)) is None else str(reason)


def _usage(response: Any) -> dict[str, int] | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    return {k: int(getattr(usage, k, 0) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _server_ms(response: Any) -> float | None:
    """What the server says it spent on the request: llama.cpp's server adds `timings` (prompt_ms, predicted_ms)
    to each response; None from servers that do not (vLLM, SGLang, OpenAI, llama-cpp-python)."""
    timings = (getattr(response, "model_extra", None) or {}).get("timings")
    if not isinstance(timings, Mapping):
        return None
    try:
        return float(timings["prompt_ms"]) + float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError):
        return None


def _stop(choice: Any) -> dict[str, Any]:
    """`stop` and `names_stop` of a choice: vLLM sends `stop_reason` (the stop string, a stop token id, or null at
    the end-of-sequence token), SGLang `matched_stop` (the string or the token id)."""
    extra = getattr(choice, "model_extra", None) or {}
    for key in ("stop_reason", "matched_stop"):
        if key in extra:
            value = extra[key]
            return {"stop": value if isinstance(value, str) else None, "names_stop": True}
    return {"stop": None, "names_stop": False}


def _detail(e: openai.APIStatusError, limit: int | None = 300) -> str:
    """The server's error message, shortened to `limit` characters (None: whole)."""
    body = e.body
    text = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, Mapping) else inner
    if not text:
        text = body if body else e.message
    return str(text)[:limit]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a response asks to wait: `retry-after-ms`, or `Retry-After` in seconds or as an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
