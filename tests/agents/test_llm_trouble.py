"""Slow LLM requests, timeouts and retries are warnings a run shows (the first few) and counts (all of them).

The requests go to the scripted chat server (chat_server.py), whose delays make a request slow or late for sure:
a reply that waits 0.3 s cannot come within 0.1 s, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import logging

import pytest

from rollout.errors import LLMError
from rollout.llm.chat_client import ChatClient, LLMSettings, RetryPolicy
from rollout.llm.trouble import (
    LOGGER,
    RETRYING,
    SHOWN_PER_KIND,
    SLOW,
    TIMEOUT_GIVING_UP,
    TIMEOUT_RETRYING,
    LLMTroubleLog,
    kinds_of,
    watch_llm_trouble,
)
from rollout.ray_console import log_batch
from rollout.view.progress import LLMTroubleColumn
from tests.agents.chat_server import MODEL, answer, error

MESSAGES = [{"role": "user", "content": "Reply with OK."}]


def client(base_url: str, *, timeout_s: float = 10.0, max_retries: int = 2, slow_call_s: float = 30.0) -> ChatClient:
    settings = LLMSettings(base_url=base_url, model=MODEL, api_key_env=None, timeout_s=timeout_s,
                           max_retries=max_retries)
    return ChatClient(settings, RetryPolicy(max_retries, backoff_base_s=0.001, backoff_max_s=0.01),
                      slow_call_s=slow_call_s)


def trouble_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


async def test_a_slow_answer_is_a_warning(chat, caplog):
    chat.push(answer("OK", delay_s=0.3))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        reply = await client(chat.base_url, slow_call_s=0.1).complete(MESSAGES)
    [(level, line)] = trouble_lines(caplog)
    assert level == logging.WARNING and line.startswith(SLOW) and chat.base_url in line
    assert "for 5 completion tokens" in line and "llm.sampling.max_tokens" in line
    assert reply.content == "OK" and reply.request_ms >= 300


async def test_a_quick_answer_says_nothing(chat, caplog):
    chat.push(answer("OK"))
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        await client(chat.base_url).complete(MESSAGES)
    assert not [line for level, line in trouble_lines(caplog) if level >= logging.WARNING]


async def test_timeouts_and_retries_are_warnings(chat, caplog):
    chat.push(error(503, "overloaded"), answer("late", delay_s=2.0), answer("late", delay_s=2.0))
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(LLMError, match="within 0.3 s"):
        await client(chat.base_url, timeout_s=0.3, max_retries=2).complete(MESSAGES)
    lines = [line for _, line in trouble_lines(caplog)]
    assert [line.split(":")[0] + ":" for line in lines] == [RETRYING, TIMEOUT_RETRYING, TIMEOUT_GIVING_UP]
    assert "HTTP 503" in lines[0] and "retry 1 of 2" in lines[0]
    assert "llm.timeout_s" in lines[1] and "retry 2 of 2" in lines[1]
    assert "gave up after 3 attempts" in lines[2]
    assert [kinds_of(line) for line in lines] == [("retry",), ("timeout", "retry"), ("timeout",)]


def record(message: str, logger: str = LOGGER) -> logging.LogRecord:
    return logging.LogRecord(logger, logging.WARNING, __file__, 1, "%s", (message,), None)


def test_a_run_shows_the_first_few_of_each_kind_then_tenfold_counts():
    trouble = LLMTroubleLog()
    slow = [record(f"[worker-{i % 8}] {SLOW} 65.0 s from http://x/v1 (over 30 s)") for i in range(1000)]
    shown = [r.getMessage() for r in slow if trouble.filter(r)]
    assert len(shown) == SHOWN_PER_KIND + 3  # then the 10th, 100th and 1000th
    assert "counted" in shown[SHOWN_PER_KIND - 1] and "10 slow calls so far" in shown[SHOWN_PER_KIND]
    assert "1000 slow calls so far" in shown[-1]
    assert trouble.filter(record(f"{TIMEOUT_RETRYING} no response; retry 1 of 5 in 0.3 s"))  # its own kind's first
    assert trouble.filter(record("an ordinary line"))
    assert trouble.progress_text() == "1 LLM timeout, 1 retry, 1000 slow calls"
    column = LLMTroubleColumn(trouble)
    assert column.render(None).plain == "1 LLM timeout, 1 retry, 1000 slow calls"  # type: ignore[arg-type]
    assert LLMTroubleLog().progress_text() == "" and LLMTroubleLog().final_line() is None


def test_a_workers_lines_forwarded_by_ray_are_counted_in_the_driver(caplog):
    """The worker logs each line; Ray hands them to the driver's logging (rollout.ray_console), where the run's
    filter counts them and shows the first few."""
    lines = [f"12:00:0{i % 10} WARNING rollout.llm.chat_client: {RETRYING} HTTP 503 from http://x/v1; retry 1 of 5"
             for i in range(12)]
    with caplog.at_level(logging.WARNING), watch_llm_trouble() as trouble:
        log_batch({"lines": lines, "actor_name": "worker-0", "pid": 7})
        assert trouble.progress_text() == "12 retries"
    shown = [m for level, m in trouble_lines(caplog)]
    assert len(shown) == SHOWN_PER_KIND + 1 and all(m.startswith(f"[worker-0] {RETRYING}") for m in shown)
    assert caplog.records[-1].getMessage().startswith("LLM requests of this run: 12 retries")
    assert not logging.getLogger(LOGGER).filters  # taken off when the run ends
