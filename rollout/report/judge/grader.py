"""An LLM judge: each scored answer of a finished run graded by a published grader prompt, without rerunning it.

The judge is any OpenAI-compatible chat-completions endpoint, asked through the agents' `ChatClient` (same
retries, timeouts and prices). Its identity (`JudgeSettings.key`) is the endpoint, the model, the preset, the hash
of the preset's prompt and the sampling: verdicts are stored per identity (`rollout.report.judge.store`), so a
second judging by the same judge asks nothing it has answered, and another judge is kept beside it.

Which tasks: those the run scores (`rollout.report.scoring.is_scored`). A failed task that the run scores
(`score_failed`) is wrong without asking, as its exact match is 0. A task is asked again only when its
prediction changed or its last request failed; a reply that could not be parsed stays as it is (a flagged verdict
with None metrics), since asking the same judge again would get the same reply.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rollout.codec import JsonRecord
from rollout.errors import ConfigError, ContextWindowExceeded, LLMError
from rollout.llm.chat_client import ChatClient, LLMSettings, RetryPolicy, plain
from rollout.llm.context_window import budget_in
from rollout.llm.settings import named_as
from rollout.records import TaskKey, TaskResult
from rollout.report.browsecomp_leaderboard import final_response
from rollout.report.judge.presets import JUDGE_CORRECT, JudgePreset, Verdict, get_preset
from rollout.wire import is_http_url

logger = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 16
"""Requests in flight at once; the judge's server decides how many it serves in parallel."""
FIRST_REQUEST_RETRIES = 2
"""The first request checks the endpoint: a dead one fails the judging in seconds, not after every task's retries."""

CONFIG_NAMES = {"model": "judge.model=NAME", "base_url": "judge.base_url=URL", "preset": "judge.preset",
                "concurrency": "judge.concurrency=N", "block": "judge"}
"""How the judge's settings are named in a run's config (the CLI and the trainers' reward pass their own names). A
setting not named here is named `<block>.<setting>`, as in the `llm:` block the agents' client names."""


class JudgeError(LLMError):
    """The judge's endpoint could not be used: one line naming what to change."""


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """A judge: the endpoint and model (an `llm:`-shaped block), the grader preset, and requests in flight."""

    llm: LLMSettings
    preset: JudgePreset
    concurrency: int = DEFAULT_CONCURRENCY
    names: Mapping[str, str] = field(default_factory=lambda: CONFIG_NAMES, compare=False, repr=False)
    """How the place the judge came from names its settings (`CONFIG_NAMES`, the CLI's options, the reward's keys):
    the advice of its errors names these."""

    @classmethod
    def from_config(cls, block: Mapping[str, Any] | Any, names: Mapping[str, str] = CONFIG_NAMES) -> JudgeSettings:
        """Check a `judge:` block; a missing or wrong value is a `ConfigError` naming the setting (`names`)."""
        c = plain(block) or {}
        if not c.get("model") or not isinstance(c["model"], str):
            raise ConfigError(f"the judge needs a model: set {names['model']} (the model its endpoint serves, "
                              f"e.g. gpt-4.1-2025-04-14)")
        base_url = c.get("base_url")
        if not is_http_url(base_url):
            raise ConfigError(f"the judge's base_url {base_url!r} must be its endpoint's http(s) URL: set "
                              f"{names['base_url']} (e.g. http://127.0.0.1:8000/v1)")
        try:
            concurrency = int(DEFAULT_CONCURRENCY if c.get("concurrency") is None else c["concurrency"])
        except (TypeError, ValueError):
            concurrency = 0
        if concurrency < 1:
            raise ConfigError(f"the judge's concurrency {c.get('concurrency')!r} must be at least 1: set "
                              f"{names['concurrency']}")
        try:
            # Its client's warnings (retries, timeouts, slow answers) name the settings as the judge's place does.
            llm = replace(LLMSettings.from_config(c, agent="judge"), names=names)
        except ConfigError as e:
            raise ConfigError(named_as(str(e), names)) from None
        return cls(llm, get_preset(str(c.get("preset") or "simpleqa"), names["preset"]), concurrency, names)

    def identity(self) -> dict[str, Any]:
        """What makes two judgings the same judge: verdicts are shared between judgings with equal identities."""
        return {"base_url": self.llm.base_url, "model": self.llm.model, "preset": self.preset.name,
                "template_sha256": self.preset.template_sha256, "sampling": dict(sorted(self.llm.sampling.items()))}

    @property
    def key(self) -> str:
        """`<preset>-<model>-<hash of the identity>`: the name of the judge's files in a run folder."""
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:10]
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", self.llm.model).strip("_.")[:40] or "model"
        return f"{self.preset.name}-{model}-{digest}"

    def describe(self) -> dict[str, Any]:
        """The judge as its description file holds it (no key: only the name of its variable)."""
        return {"judge_key": self.key, **self.identity(), "source": self.preset.source,
                "metrics": list(self.preset.metrics), "api_key_env": self.llm.api_key_env,
                "timeout_s": self.llm.timeout_s, "max_retries": self.llm.max_retries,
                "prices": {"prompt": self.llm.price_prompt, "completion": self.llm.price_completion}}


def gold_target(golden_answers: Iterable[str]) -> str:
    """The gold answers as the prompt's one target: aliases of one answer joined by " | " (one answer as is)."""
    return " | ".join(a.strip() for a in golden_answers if a and a.strip())


def prediction_hash(prediction: str) -> str:
    return hashlib.sha256(prediction.encode()).hexdigest()[:16]


@dataclass(slots=True)
class JudgeRecord(JsonRecord):
    """One task's verdict by one judge, with the judge's raw reply and what asking cost."""

    id: str
    """Question id."""
    repeat: int
    """Which repeat of the question."""
    label: str | None
    """The grade as the preset names it; None when the reply could not be parsed or the request failed."""
    metrics: dict[str, float | None]
    """The preset's metrics (None each when there is no verdict)."""
    reply: str | None
    """The judge's reply as sent (None when the request failed)."""
    prediction_sha256: str
    """Hash of the text judged (`judged_text`): a changed answer is judged again."""
    extracted_answer: str | None = None
    """The final answer the judge read from the response (browsecomp presets)."""
    usage: dict[str, float] = field(default_factory=dict)
    """The judge's tokens (and cost_usd when priced) for this verdict; never part of the agent's usage."""
    latency_ms: float = 0.0
    """Wall time of the request, retries included."""
    attempts: int = 0
    """HTTP requests made for this verdict."""
    error: str | None = None
    """Why the request failed (it is asked again next time), or None."""

    @property
    def key(self) -> TaskKey:
        return self.id, self.repeat

    @property
    def unparsed(self) -> bool:
        """The judge replied, but not in its preset's format: flagged, scored as None, never as wrong."""
        return self.error is None and self.label is None


def failed_task_metrics(preset: JudgePreset) -> dict[str, float | None]:
    """The metrics of a failed task the run scores: wrong, as its exact match is 0; nothing else is known."""
    return {m: 0.0 if m == JUDGE_CORRECT else None for m in preset.metrics}


def judged_text(task: TaskResult, preset: JudgePreset) -> str:
    """What the judge reads of a task: its prediction, or for a preset that reads whole responses the agent's last
    message (the prediction when the record kept no message)."""
    return final_response(task) if preset.reads_response else task.prediction


def reread(record: JudgeRecord, preset: JudgePreset) -> JudgeRecord:
    """A kept verdict as the preset's parser reads its reply now (a reply an older parser misread is read again)."""
    if record.error is not None or record.reply is None:
        return record
    verdict = preset.parse(record.reply)
    return replace(record, label=verdict.label, metrics=verdict.metrics, extracted_answer=verdict.extracted_answer)


def needs_asking(task: TaskResult, cached: JudgeRecord | None, preset: JudgePreset) -> bool:
    return (cached is None or cached.error is not None
            or cached.prediction_sha256 != prediction_hash(judged_text(task, preset)))


def unanswered(e: LLMError, settings: JudgeSettings) -> str:
    """Why the judge could not answer `e`'s request, and the fix, named as the judge's place names its settings. A
    prompt longer than the judge model's context is no dead server: the server answered, refusing it."""
    s, names = settings.llm, settings.names
    said = named_as(str(e), names)
    if isinstance(e, ContextWindowExceeded):
        budget = budget_in(str(e))
        room = (f", or leave its reply less room ({named_as('llm.sampling.max_tokens', names)})"
                if budget is not None and budget[1] else "")
        return (f"the judge prompt is too long for the context of the judge model {s.model} at {s.base_url} ({said}): "
                f"judge with a model of a longer context ({names['model']}), or serve this one with a larger context "
                f"(llama.cpp's server -c N, vLLM --max-model-len N, SGLang --context-length N){room}")
    return (f"the judge (model {s.model} at {s.base_url}) cannot be asked: {said}. Start the judge's server there, or "
            f"point the judge at one ({names['base_url']} {names['model']})")


class Judge:
    """Asks one judge about many answers, `concurrency` at a time, through one `ChatClient`."""

    def __init__(self, settings: JudgeSettings, client: ChatClient | None = None) -> None:
        self.settings = settings
        self.client = client or ChatClient(settings.llm, RetryPolicy(settings.llm.max_retries))

    async def ask(self, task: TaskResult, *, max_retries: int | None = None) -> JudgeRecord:
        """One verdict; `LLMError` when the request fails after its retries."""
        preset = self.settings.preset
        text = judged_text(task, preset)
        messages = preset.messages(task.question, gold_target(task.golden_answers), text)
        completion = await self.client.complete(messages, max_retries=max_retries)
        reply = completion.content or ""
        verdict: Verdict = preset.parse(reply)
        return JudgeRecord(task.id, task.repeat, verdict.label, verdict.metrics, reply, prediction_hash(text),
                           verdict.extracted_answer, self.settings.llm.priced(completion.usage or {}),
                           completion.latency_ms, completion.attempts)

    async def judge_all(self, tasks: list[TaskResult], on_record: Callable[[JudgeRecord], None]) -> None:
        """Judge `tasks`, handing each record to `on_record` as it arrives (on this loop's thread).

        The first task is asked alone with a short retry budget: an endpoint that cannot answer raises `JudgeError`
        naming the fix before anything else is asked. After it, a failed request becomes a record with its `error`
        (asked again by the next judging)."""
        if not tasks:
            return
        try:
            try:
                first = await self.ask(tasks[0], max_retries=min(FIRST_REQUEST_RETRIES, self.settings.llm.max_retries))
            except LLMError as e:
                raise JudgeError(unanswered(e, self.settings)) from e
            on_record(first)
            queue: asyncio.Queue[TaskResult] = asyncio.Queue()
            for task in tasks[1:]:
                queue.put_nowait(task)
            workers = [asyncio.create_task(self._worker(queue, on_record))
                       for _ in range(min(self.settings.concurrency, queue.qsize()))]
            await asyncio.gather(*workers)
        finally:
            await self.client.aclose()

    async def _worker(self, queue: asyncio.Queue[TaskResult], on_record: Callable[[JudgeRecord], None]) -> None:
        while not queue.empty():
            task = queue.get_nowait()
            try:
                record = await self.ask(task)
            except LLMError as e:
                logger.debug("judge request for %s (repeat %d) failed: %s", task.id, task.repeat, e)
                record = JudgeRecord(task.id, task.repeat, None, self.settings.preset.unparsed().metrics, None,
                                     prediction_hash(judged_text(task, self.settings.preset)), error=str(e))
            on_record(record)


def judge_sync(judge: Judge, tasks: list[TaskResult], on_record: Callable[[JudgeRecord], None]) -> float:
    """`Judge.judge_all` in its own event loop; the wall time in seconds."""
    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(judge.judge_all(tasks, on_record))
    return time.perf_counter() - t0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (uvicorn's standard extra brings it): less CPU per request than
    asyncio's (2.1 against 2.6 ms of the client's CPU per verdict, measured here under load), and the client's CPU is
    what bounds thousands of judge requests in flight on a busy core."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
