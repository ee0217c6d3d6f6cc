"""Why a request to the LLM endpoint failed, and whether trying it again could help.

Retried: 408, 429 (after its `Retry-After`), 5xx, connection errors and timeouts. Not retried, since the same
request would fail the same way: any other HTTP status (a refusal, `LLMError` saying what to change), a context
overflow (`ContextWindowExceeded`: the agent's limit, in the server's own words), a tool call the model wrote that
the server could not read (`UnreadableToolCall`: llama-server's HTTP 500, the model's outcome) and a body that is
not a completion.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass

try:
    import openai
except ImportError:  # only an LLM agent needs it; `ChatClient` names the install line
    openai = None  # type: ignore[assignment]

from rollout.errors import ContextWindowExceeded, LLMError, UnreadableToolCall
from rollout.llm.context_window import is_context_overflow
from rollout.llm.response import CHAT_ENDPOINT, TEXT_ENDPOINT, not_a_completion
from rollout.llm.settings import NO_KEY, LLMSettings

RETRYABLE_STATUS = frozenset({408, 429})
"""HTTP statuses below 500 that are retried."""

UNREADABLE_CALL_ERRORS = ("Failed to parse tool call arguments as JSON", "Failed to parse input at pos")
"""How llama-server's HTTP 500 opens when its parser cannot read the tool call the model generated (its older and
its newer parser); "Failed to parse tools" (the request's tool list) is not among them."""


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, classified."""

    retryable: bool
    description: str
    retry_after_s: float | None = None
    error: type[LLMError] = LLMError
    """What a failure that is not retried raises."""
    timeout: bool = False
    """The attempt got no response within its time."""


def classify(e: BaseException, settings: LLMSettings, timeout: float, endpoint: str = CHAT_ENDPOINT) -> Failure:
    """What the failed attempt `e` (an `openai.APIError` or a `TimeoutError`) means, and whether to retry it."""
    where = f"{settings.base_url}"
    if isinstance(e, (TimeoutError, openai.APITimeoutError)):
        return Failure(True, f"no response from {where} within {timeout:g} s (llm.timeout_s)", timeout=True)
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e
        return Failure(True, f"could not connect to {where} ({type(cause).__name__}: {cause}): start your "
                             "server there or set llm.base_url=URL (e.g. http://127.0.0.1:8000/v1)")
    if isinstance(e, openai.APIStatusError):
        status, detail = e.status_code, _detail(e)
        if is_context_overflow(status, e.body):  # the agent's limit, not the endpoint's fault: its own message
            return Failure(False, _detail(e, limit=None), error=ContextWindowExceeded)
        if status >= 500 and _detail(e, limit=None).startswith(UNREADABLE_CALL_ERRORS):  # the model's output
            return Failure(False, _detail(e, limit=None), error=UnreadableToolCall)
        if status in RETRYABLE_STATUS or status >= 500:
            return Failure(True, f"HTTP {status} from {where}: {detail}", _retry_after(e.response.headers))
        return Failure(False, refusal(settings, status, detail, endpoint))
    if isinstance(e, openai.APIResponseValidationError):
        return Failure(False, not_a_completion(settings.base_url, str(e), endpoint))
    return Failure(False, f"{where}: {type(e).__name__}: {e}")


def refusal(settings: LLMSettings, status: int, detail: str, endpoint: str = CHAT_ENDPOINT) -> str:
    """The message of a deterministic HTTP failure: what happened and what to change."""
    s = settings
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
                     "agent.wire=chat uses /v1/chat/completions") if endpoint == TEXT_ENDPOINT else ""
        return (f"model {s.model} not found at base_url {s.base_url} (HTTP 404: {detail}): check llm.model / "
                f"llm.base_url (OpenAI-compatible servers serve under /v1, e.g. http://127.0.0.1:8000/v1){text_only}")
    what = ("" if endpoint == TEXT_ENDPOINT else ", and that the server supports tool calling "
            "(vLLM: --enable-auto-tool-choice --tool-call-parser NAME)")
    return f"{s.base_url} rejected the request for model {s.model} (HTTP {status}: {detail}); check llm.sampling{what}"


def refused(e: LLMError) -> bool:
    """Whether the endpoint refused the request outright (an HTTP status that is not retried), so that the same
    request would be refused again, as opposed to not answering in time or failing on its side."""
    cause = e.__cause__
    return openai is not None and isinstance(cause, openai.APIStatusError) and cause.status_code < 500 \
        and cause.status_code not in RETRYABLE_STATUS


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
