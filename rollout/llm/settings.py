"""What an LLM client is made from: the `llm:` block checked (`LLMSettings`) and the retry waits (`RetryPolicy`).

Kept apart from `rollout.llm.chat_client` so that what reads a config (the gateway's step tools, a run's checks)
need not import `openai`.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

from rollout.errors import ConfigError
from rollout.llm.sampling_keys import check_sampling_keys
from rollout.wire import is_http_url

NO_KEY = "EMPTY"
"""Sent when the key's environment variable is unset: local servers (vLLM, SGLang, Ollama) need none."""


_CLIENT_SETTINGS = re.compile(r"\bllm\.((?:base_url|model|api_key_env|timeout_s|max_retries|sampling|prices|"
                              r"context_window)(?:\.\w+)?)(?:=([^\s,;:)]+))?")
"""A setting of the `llm:` block as the client names it in its messages (`llm.base_url=URL`)."""


def named_as(message: str, names: Mapping[str, str]) -> str:
    """`message`, which names the client's `llm.` settings, with each setting named as the place its settings came
    from names it (`names`: `--base-url URL` on the judge's command line, `judge.base_url=URL` in a run's config; a
    setting not in it is `<names["block"]>.<setting>`), keeping the value the message gives (`llm.max_retries=2` is
    `--max-retries 2`)."""

    def name(found: re.Match[str]) -> str:
        setting, value = found[1], found[2]
        option = names.get(setting) or f"{names.get('block', 'llm')}.{setting}"
        if value is None:
            return option
        stem = re.split(r"[= ]", option, maxsplit=1)[0]
        return f"{stem} {value}" if stem.startswith("--") else f"{stem}={value}"

    return _CLIENT_SETTINGS.sub(name, message)


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
    (`rollout.llm.context_window`); None leaves the check to the server."""
    names: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    """How the place these settings came from names them when it is not an agent's `llm:` block (the judge's
    command line, a run's `judge:` block, a trainer's reward): the client's warnings name them so (`named`)."""

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
        if not is_http_url(base_url):
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

    def named(self, message: str) -> str:
        """`message`, which names the `llm.` settings, naming them as the place these settings came from does."""
        return message if self.names is None else named_as(message, self.names)

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


def refuse_sampling_seed(settings: LLMSettings, agent: str) -> None:
    """A `ConfigError` when `llm.sampling.seed` is set for an agent that sends the run's seed with every request
    (repeat r of a run with `seed=S` samples with S + r): that seed would replace it, so it would never be sent."""
    seed = settings.sampling.get("seed")
    if seed is not None:
        raise ConfigError(f"llm.sampling.seed={seed} is never sent: agent={agent} samples every request with the "
                          f"run's seed (repeat r gets seed + r), which replaces it; set seed={seed} instead")


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
