"""The judge's warnings while it retries (and when it is slow) name the option of the place that runs it, as its final
line does: `--base-url` for `rollout report judge`, `judge.base_url=URL` at a run's end,
`reward_kwargs.judge.base_url=URL` in a trainer's reward; the agent's own client keeps `llm.base_url=URL`."""

from __future__ import annotations

import logging
import random

import pytest
from rich.console import Console

from rollout.llm.chat_client import ChatClient, RetryPolicy
from rollout.llm.trouble import LOGGER, RETRYING, SLOW, TIMEOUT_GIVING_UP, TIMEOUT_RETRYING
from rollout.report.judge.command import judge_run
from rollout.report.judge.grader import Judge, JudgeError
from tests.report.judge_runs import make_run, task
from tests.report.judge_server import answer, judge_server
from tests.report.test_judge import DEAD, cli, settings


@pytest.fixture(scope="module")
def server():
    with judge_server() as s:
        yield s


def trouble(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings the LLM client logged."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_rollout_report_judge_against_a_closed_port_names_base_url_on_every_line(tmp_path):
    run = make_run(tmp_path)
    result = cli("judge", run, "--model", "m", "--base-url", DEAD, "--max-retries", "1")
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    [retry] = [line for line in lines if RETRYING in line]
    assert "set --base-url URL" in retry
    assert [line for line in lines if "llm.base_url" in line] == [], result.stderr
    assert "llm." not in result.stderr


def test_a_judge_that_times_out_names_the_commands_timeout_and_retries(server, tmp_path, caplog):
    run = make_run(tmp_path)
    server.push(answer("A", delay_s=2.0), answer("A", delay_s=2.0))
    with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(JudgeError):
        judge_run(run, settings(server, run, "--timeout-s", "0.3", "--max-retries", "1"))
    lines = trouble(caplog)
    [retried] = [line for line in lines if line.startswith(TIMEOUT_RETRYING)]
    [gave_up] = [line for line in lines if line.startswith(TIMEOUT_GIVING_UP)]
    assert "(--timeout-s)" in retried and "(--max-retries)" in gave_up
    assert not [line for line in lines if "llm." in line], lines


async def test_a_slow_judge_names_the_commands_token_limit(server, tmp_path, caplog):
    run = make_run(tmp_path)
    judge = settings(server, run)
    client = ChatClient(judge.llm, RetryPolicy(0), random.Random(0), slow_call_s=0.0)
    with caplog.at_level(logging.WARNING, LOGGER):
        await Judge(judge, client).ask(task("q1", ["Ann"], "Ann"))
    await client.aclose()
    [slow] = [line for line in trouble(caplog) if line.startswith(SLOW)]
    assert "set --max-tokens" in slow and "llm." not in slow


def test_a_dead_judge_at_the_end_of_a_run_warns_with_the_runs_setting(tmp_path, caplog):
    from rollout.report.judge.command import judge_finished_run
    from rollout.run.config import compose_run_config

    run = make_run(tmp_path)
    judge = compose_run_config("judge.model=m", f"judge.base_url={DEAD}", "judge.max_retries=1").judge_settings()
    with caplog.at_level(logging.WARNING, LOGGER):
        assert judge_finished_run(run, judge, Console(width=200)) is None
    [retry] = [line for line in trouble(caplog) if line.startswith(RETRYING)]
    assert "set judge.base_url=URL" in retry and "llm." not in retry


async def test_a_dead_judge_of_a_training_reward_warns_with_the_rewards_setting(caplog):
    from rollout.trainers.reward import compute_judge_score

    with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(JudgeError):
        await compute_judge_score("demo", "<answer>Ann Lee</answer>", {"target": ["Ann Lee"]}, {"question": "Who?"},
                                  judge={"model": "m", "base_url": DEAD, "max_retries": 1})
    [retry] = [line for line in trouble(caplog) if line.startswith(RETRYING)]
    assert "set reward_kwargs.judge.base_url=URL" in retry and "llm." not in retry


async def test_the_agents_own_client_still_names_llm_base_url(caplog):
    from rollout.errors import LLMError
    from rollout.llm.settings import LLMSettings

    client = ChatClient(LLMSettings(DEAD, "m", max_retries=1), RetryPolicy(1, 0.0, 0.0))
    with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(LLMError):
        await client.complete([{"role": "user", "content": "hi"}])
    await client.aclose()
    [retry] = [line for line in trouble(caplog) if line.startswith(RETRYING)]
    assert "set llm.base_url=URL" in retry
