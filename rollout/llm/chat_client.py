"""One chat-completions (or text-completions) request at a time, with explicit, bounded retries.

The `openai` SDK's own retries are off (`max_retries=0`): retrying here keeps the policy visible in
config and testable. A request is retried on 408, 429 (after its `Retry-After`, capped), 5xx,
connection errors and timeouts, with exponential backoff and full jitter, at most
`llm.max_retries` times. Anything else — 400, 401, 403, 404, 422, a body that is not a chat
completion — is deterministic: retrying would fail the same way, so it raises `LLMError` at once
with what to fix. Every attempt is bounded by `llm.timeout_s` and every wait by a cap, so a request
always ends. `ChatClient.complete` posts to `/chat/completions`, `ChatClient.complete_text` to
`/completions` (a prompt the caller built, for agents that write plain text); both share the policy.

Every timeout, retry and answer slower than `SLOW_CALL_S` is a warning line (`rollout.llm.trouble`: a run
shows the first few and counts the rest), and every answer says when its attempt was sent and how long it took,
and how long the server says it worked on it, for the summary's measure of the endpoint (`rollout.report.endpoint`).

This module is the HTTP client and its retry loop; the rest lives beside it and is re-exported here:
`rollout.llm.settings` (the `llm:` block checked, the retry waits), `rollout.llm.response` (a
response read into a `Completion`, on either wire) and `rollout.llm.failures` (which failures are retried,
and the message of those that are not).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

try:
    import openai
except ImportError:  # only agent=openai needs it; ChatClient names the install line instead of failing at import
    openai = None  # type: ignore[assignment]

from rollout.errors import ConfigError, LLMError
from rollout.llm.context_window import ContextBudget
from rollout.llm.failures import classify, refused
from rollout.llm.response import (
    CHAT_ENDPOINT,
    TEXT_ENDPOINT,
    Completion,
    ToolCallRequest,
    chat_completion,
    server_ms,
    text_completion,
)
from rollout.llm.sampling_keys import SDK_PARAMS, TEXT_SDK_PARAMS
from rollout.llm.settings import NO_KEY, LLMSettings, RetryPolicy, plain
from rollout.llm.trouble import SLOW_CALL_S, gave_up_line, retry_line, slow_line

__all__ = ["NO_KEY", "ChatClient", "Completion", "LLMSettings", "RetryPolicy", "ToolCallRequest", "plain", "refused"]

logger = logging.getLogger(__name__)


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
        tool_choice: str | Mapping[str, Any] | None = None,
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
        return await self._retrying(lambda: self._openai().chat.completions.create(**kwargs), chat_completion,
                                    CHAT_ENDPOINT, max_retries, timeout)

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
        return await self._retrying(lambda: self._openai().completions.create(**kwargs), text_completion,
                                    TEXT_ENDPOINT, max_retries, timeout)

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
        self, create: Callable[[], Awaitable[Any]], parse: Callable[[Any, str, str, float, int], Completion],
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
                failure = classify(e, self.settings, timeout, endpoint)
                if not failure.retryable:
                    raise failure.error(failure.description) from e
                if attempt > retries:
                    if failure.timeout:  # other failures surface as the task's error alone
                        logger.warning("%s", self.settings.named(gave_up_line(failure.description, attempts=attempt)))
                    budget = f"; llm.max_retries={retries}" if max_retries is None else ""
                    raise LLMError(f"{failure.description} (gave up after {attempt} attempts{budget})") from e
            else:
                now = time.perf_counter()
                reply = parse(response, self.settings.base_url, endpoint, (now - t0) * 1000, attempt)
                if now - t_sent > self.slow_call_s:
                    completion_tokens = (reply.usage or {}).get("completion_tokens")
                    logger.warning("%s", self.settings.named(slow_line(now - t_sent, self.settings.base_url,
                                                                       completion_tokens, self.slow_call_s)))
                return replace(reply, sent=sent, request_ms=(now - t_sent) * 1000, server_ms=server_ms(response))
            wait = self.retry.delay(attempt - 1, failure.retry_after_s, self._rng)
            logger.warning("%s", self.settings.named(retry_line(failure.description, timeout=failure.timeout,
                                                                retry=attempt, retries=retries, wait_s=wait)))
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
    def _add_tools(kwargs: dict[str, Any], tools: list[dict[str, Any]] | None,
                   tool_choice: str | Mapping[str, Any] | None, parallel_tool_calls: bool | None) -> None:
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
            if parallel_tool_calls is not None:
                kwargs["parallel_tool_calls"] = parallel_tool_calls
