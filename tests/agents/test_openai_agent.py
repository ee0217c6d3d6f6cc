"""The OpenAI-compatible agent against a scripted chat-completions server on loopback (chat_server.py).

Every request goes through the `openai` SDK, httpx and a real socket; tool calls go through a real
environment session to a real gateway, so these tests see the wire format both ways.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from typing import Any

import pytest
from hydra.utils import instantiate

from envs import HttpMCPRagEnv
from rollout.agents.openai_agent import (
    FINAL_TURN_PROMPT,
    OpenAIAgent,
    extract_answer,
    split_thinking,
)
from rollout.errors import ConfigError, LLMError
from rollout.events import (
    EventLog,
    LLMOutputEvent,
    LLMThinkingEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.gateway_file import GATEWAYS_DIR
from rollout.llm.chat_client import LLMSettings, RetryPolicy
from rollout.run.config import compose_run_config
from tests.agents.chat_server import (
    MODEL,
    Reply,
    answer,
    error,
    tool_calls,
    usage,
)
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import sparse_kb

SPARSE = "query_knowledge_base_sparse"
SPARSE_ONLY = GATEWAYS_DIR / "rag_sparse_only.json"
SYSTEM_PROMPT = "You answer from a knowledge base; search it with query_knowledge_base_sparse."
KEY_ENV = "ROLLOUT_TEST_LLM_KEY"
QUESTION = "Where was Arlen Voss born?"


@pytest.fixture(scope="module")
async def env(tmp_path_factory) -> Any:
    """A real environment session on a real sparse-only gateway (three passages, see loopback.py)."""
    with gateway_on_loopback(SPARSE_ONLY, sparse_kb(), tmp_path_factory.mktemp("gw")) as url:
        async with HttpMCPRagEnv(url, SPARSE_ONLY, system_prompt=SYSTEM_PROMPT) as e:
            yield e


@pytest.fixture
def retries(monkeypatch) -> list[float]:
    """The waits the retry policy chose, in order (the policy is still the real one)."""
    chosen: list[float] = []
    real = RetryPolicy.delay

    def spy(self: RetryPolicy, n: int, retry_after_s: float | None, rng: random.Random) -> float:
        chosen.append(real(self, n, retry_after_s, rng))
        return chosen[-1]

    monkeypatch.setattr(RetryPolicy, "delay", spy)
    return chosen


def llm(base_url: str, **overrides: Any) -> dict[str, Any]:
    return {"base_url": base_url, "model": MODEL, "api_key_env": KEY_ENV, "timeout_s": 10, "max_retries": 3,
            "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 256},
            "prices": {"prompt": None, "completion": None}, **overrides}


def make_agent(base_url: str, *, max_turns: int = 4, **llm_overrides: Any) -> OpenAIAgent:
    return OpenAIAgent(llm(base_url, **llm_overrides), max_turns=max_turns, backoff_base_s=0.001,
                       backoff_max_s=0.01, retry_after_max_s=0.05)


def dead_url() -> tuple[socket.socket, str]:
    """A loopback port that is bound but not listening: connecting is refused at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_full_task_calls_real_tools_and_sums_usage(chat, env):
    chat.push(
        tool_calls((SPARSE, {"query": "Arlen Voss born", "top_k": 2}), tokens=usage(30, 7)),
        answer("<think>The first passage names the city.</think>Answer: Kelmor", tokens=usage(60, 4)),
    )
    agent = make_agent(chat.base_url, prices={"prompt": 2.0, "completion": 8.0})
    events = EventLog("t1")
    session = env.for_task("t1", events)

    result = await agent.run(QUESTION, session, events)

    assert (result.prediction, result.turns) == ("Kelmor", 2)
    assert result.usage == {"prompt_tokens": 90, "completion_tokens": 11, "total_tokens": 101,
                            "cost_usd": pytest.approx((90 * 2.0 + 11 * 8.0) / 1e6)}
    [call] = session.calls
    assert (call.name, call.arguments, call.outcome) == (SPARSE, {"query": "Arlen Voss born", "top_k": 2}, "ok")
    assert call.result_ids[0] == "d0"

    first, second = chat.chat_requests
    assert first["model"] == MODEL and first["temperature"] == 0.0 and first["max_tokens"] == 256
    assert first["messages"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    assert [t["function"]["name"] for t in first["tools"]] == [SPARSE]
    assert first["tool_choice"] == "auto"  # said outright: llama.cpp's server leaves the tools out without it
    call_id = chat.sent[0]["choices"][0]["message"]["tool_calls"][0]["id"]
    [tool_message] = tool_messages(second)
    assert tool_message["tool_call_id"] == call_id and "Arlen Voss was born in Kelmor" in tool_message["content"]
    assert second["messages"][2]["tool_calls"][0]["id"] == call_id

    kinds = [type(e) for e in events.events]
    assert kinds == [LLMOutputEvent, ToolCallEvent, ToolResultEvent, LLMThinkingEvent, LLMOutputEvent]
    out1, out2 = (e for e in events.events if isinstance(e, LLMOutputEvent))
    assert out1.turn == 1 and out1.tool_calls == [{"id": call_id, "name": SPARSE,
                                                   "arguments": {"query": "Arlen Voss born", "top_k": 2}}]
    assert out1.usage == usage(30, 7) and out1.latency_ms > 0
    assert out2.turn == 2 and out2.content == "Answer: Kelmor" and out2.tool_calls == []
    assert events.events[3].content == "The first passage names the city."
    assert result.messages[-1] == {"role": "assistant", "content": "Answer: Kelmor"}


async def test_cost_is_left_out_unless_both_prices_are_set(chat, env):
    agent = make_agent(chat.base_url, prices={"prompt": 2.0, "completion": None})
    result = await agent.run(QUESTION, env.for_task("t"), EventLog("t"))
    assert result.usage["prompt_tokens"] > 0 and "cost_usd" not in result.usage


async def test_reasoning_content_becomes_a_thinking_event(chat, make_tools):
    chat.push(answer("Kelmor", reasoning="Voss was born in Kelmor."))
    events = EventLog("t")
    result = await make_agent(chat.base_url).run(QUESTION, make_tools(), events)
    assert result.prediction == "Kelmor"
    [thinking] = [e for e in events.events if isinstance(e, LLMThinkingEvent)]
    assert (thinking.turn, thinking.content) == (1, "Voss was born in Kelmor.")


async def test_429_is_retried_after_its_retry_after(chat, make_tools, retries):
    chat.push(error(429, "slow down", headers={"Retry-After": "0.02"}),
              error(429, "slow down", headers={"Retry-After": "3600"}),  # asks too much: cut to retry_after_max_s
              answer("Kelmor"))
    events = EventLog("t")
    result = await make_agent(chat.base_url, max_retries=3).run(QUESTION, make_tools(), events)
    assert result.prediction == "Kelmor"
    assert len(chat.chat_requests) == 3
    assert retries == [0.02, 0.05]
    [output] = [e for e in events.events if isinstance(e, LLMOutputEvent)]
    assert output.content == "Kelmor"


async def test_5xx_beyond_max_retries_is_an_llm_error(chat, make_tools, retries):
    chat.push(*[error(500, "engine crashed") for _ in range(6)])
    with pytest.raises(LLMError, match=r"HTTP 500 .*engine crashed.*gave up after 3 attempts; llm.max_retries=2"):
        await make_agent(chat.base_url, max_retries=2).run(QUESTION, make_tools(), EventLog("t"))
    assert len(chat.chat_requests) == 3
    assert len(retries) == 2 and all(0 <= w <= 0.01 for w in retries)


async def test_5xx_then_success_is_retried(chat, make_tools, retries):
    chat.push(error(503, "loading"), error(502, "bad gateway"), answer("Kelmor"))
    result = await make_agent(chat.base_url, max_retries=2).run(QUESTION, make_tools(), EventLog("t"))
    assert result.prediction == "Kelmor" and len(chat.chat_requests) == 3 and len(retries) == 2


@pytest.mark.parametrize(("status", "fix"), [
    (400, "llm.sampling"),
    (401, KEY_ENV),
    (404, "llm.model"),
    (422, "llm.sampling"),
])
async def test_deterministic_failures_are_not_retried(chat, make_tools, retries, status, fix):
    chat.push(error(status, "scripted refusal"), answer("never sent"))
    with pytest.raises(LLMError, match="scripted refusal") as info:
        await make_agent(chat.base_url, max_retries=5).run(QUESTION, make_tools(), EventLog("t"))
    assert f"HTTP {status}" in str(info.value) and fix in str(info.value)
    assert len(chat.chat_requests) == 1 and retries == []


async def test_timeout_is_retried(chat, make_tools, retries):
    chat.push(Reply(body=answer("late").body, delay_s=2.0), answer("Kelmor"))
    result = await make_agent(chat.base_url, timeout_s=0.3, max_retries=1).run(QUESTION, make_tools(), EventLog("t"))
    assert result.prediction == "Kelmor" and len(chat.chat_requests) == 2 and len(retries) == 1


async def test_a_body_that_is_not_a_chat_completion_is_an_llm_error(chat, make_tools, retries):
    chat.push(Reply(body={"object": "list", "data": []}))
    with pytest.raises(LLMError, match="did not answer with a chat completion"):
        await make_agent(chat.base_url).run(QUESTION, make_tools(), EventLog("t"))
    assert retries == []


async def test_malformed_tool_arguments_go_back_to_the_model(chat, env):
    chat.push(
        tool_calls((SPARSE, '{"query": "Arlen Voss')),  # cut off mid-string
        tool_calls((SPARSE, '["Arlen Voss"]')),          # valid JSON, not an object
        tool_calls((SPARSE, {"query": "Arlen Voss born"})),
        answer("Kelmor"),
    )
    events = EventLog("t")
    session = env.for_task("t", events)
    result = await make_agent(chat.base_url, max_turns=5).run(QUESTION, session, events)

    assert (result.prediction, result.turns) == ("Kelmor", 4)
    assert [c.arguments for c in session.calls] == [{"query": "Arlen Voss born"}]
    requests = chat.chat_requests
    [not_json] = tool_messages(requests[1])
    assert not_json["content"].startswith(f"Error: the arguments of {SPARSE} are not valid JSON")
    assert not_json["tool_call_id"] == chat.sent[0]["choices"][0]["message"]["tool_calls"][0]["id"]
    not_object = tool_messages(requests[2])[1]
    assert "must be a JSON object, got list" in not_object["content"]
    first = next(e for e in events.events if isinstance(e, LLMOutputEvent))
    assert first.tool_calls[0]["arguments"] == '{"query": "Arlen Voss'  # the raw text, as the model wrote it
    # The history sends the call back as JSON the server can parse: a string of what was written, the list as it is.
    sent_back = [m["tool_calls"][0]["function"]["arguments"] for m in requests[2]["messages"] if m.get("tool_calls")]
    assert sent_back == [json.dumps('{"query": "Arlen Voss'), '["Arlen Voss"]']


async def test_a_tool_that_raises_becomes_an_error_message(chat, make_tools, monkeypatch):
    tools = make_tools(SPARSE)

    async def broken(name: str, arguments: dict[str, Any]) -> Any:
        raise RuntimeError("index file vanished")

    monkeypatch.setattr(tools, "call_tool", broken)
    chat.push(tool_calls((SPARSE, {"query": "Voss"})), answer("Kelmor"))
    result = await make_agent(chat.base_url).run(QUESTION, tools, EventLog("t"))
    [message] = tool_messages(chat.chat_requests[1])
    assert message["content"] == "Error: RuntimeError: index file vanished" and result.prediction == "Kelmor"


async def test_last_turn_is_sent_with_tool_choice_none(chat, env):
    # A model that would search forever: every reply asks for a tool, the last one too.
    chat.push(*[tool_calls((SPARSE, {"query": f"Voss {i}"})) for i in range(3)])
    events = EventLog("t")
    session = env.for_task("t", events)
    result = await make_agent(chat.base_url, max_turns=3).run(QUESTION, session, events)

    requests = chat.chat_requests
    assert [r.get("tool_choice") for r in requests] == ["auto", "auto", "none"]
    assert requests[-1]["messages"][-1] == {"role": "user", "content": FINAL_TURN_PROMPT}
    assert result.turns == 3 and len(session.calls) == 2  # the last reply's tool call is not run
    last = [e for e in events.events if isinstance(e, LLMOutputEvent)][-1]
    assert last.turn == 3 and last.tool_calls == []


@pytest.mark.parametrize(("choice", "sent"), [
    ("required", "required"),
    ("none", "none"),
    (SPARSE, {"type": "function", "function": {"name": SPARSE}}),
])
async def test_tool_choice_is_sent_on_every_turn_but_the_last(chat, env, choice, sent):
    chat.push(*[tool_calls((SPARSE, {"query": f"Voss {i}"})) for i in range(3)])
    agent = OpenAIAgent(llm(chat.base_url), max_turns=3, tool_choice=choice)
    await agent.run(QUESTION, env.for_task("t"), EventLog("t"))
    assert [r.get("tool_choice") for r in chat.chat_requests] == [sent, sent, "none"]


def test_a_tool_choice_naming_no_offered_tool_is_refused(chat, env):
    specs = list(env.for_task("probe").tool_specs)
    OpenAIAgent(llm(chat.base_url), tool_choice=SPARSE).check_tools(specs)  # an offered tool's name passes
    agent = OpenAIAgent(llm(chat.base_url), tool_choice="query_knowledge_base_dense")
    with pytest.raises(ConfigError, match=f"agent.tool_choice=query_knowledge_base_dense .*{SPARSE}"):
        agent.check_tools(specs)


async def test_single_turn_budget_answers_at_once(chat, env):
    result = await make_agent(chat.base_url, max_turns=1).run(QUESTION, env.for_task("t"), EventLog("t"))
    [request] = chat.chat_requests
    assert request["tool_choice"] == "none" and request["messages"][-1]["role"] == "user"
    assert FINAL_TURN_PROMPT not in str(request["messages"]) and result.turns == 1


async def test_no_tools_means_no_tools_field(chat, make_tools):
    result = await make_agent(chat.base_url).run(QUESTION, make_tools(), EventLog("t"))
    [request] = chat.chat_requests
    assert "tools" not in request and "tool_choice" not in request
    assert result.prediction == "I don't know." and result.turns == 1


async def test_api_key_is_sent_from_the_named_variable(chat, make_tools, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    await make_agent(chat.base_url).run(QUESTION, make_tools(), EventLog("t"))
    monkeypatch.delenv(KEY_ENV)
    await make_agent(chat.base_url).run(QUESTION, make_tools(), EventLog("t"))
    assert [h["authorization"] for h in chat.headers] == ["Bearer sk-test-123", "Bearer EMPTY"]


async def test_extra_sampling_keys_go_into_the_body(chat, make_tools):
    agent = make_agent(chat.base_url, sampling={"temperature": 0.7, "top_k": 20, "max_tokens": None})
    await agent.run(QUESTION, make_tools(), EventLog("t"))
    [request] = chat.chat_requests
    assert request["temperature"] == 0.7 and request["top_k"] == 20 and "max_tokens" not in request


async def test_check_passes_against_a_serving_endpoint(chat):
    await make_agent(chat.base_url).check()
    [request] = chat.chat_requests
    assert request["model"] == MODEL and request["max_tokens"] == 1


async def test_check_against_a_dead_port_names_the_fix(retries):
    sock, url = dead_url()
    try:
        with pytest.raises(LLMError) as info:
            await make_agent(url, max_retries=5).check()
    finally:
        sock.close()
    message = str(info.value)
    assert "preflight" in message and url in message and "llm.base_url=" in message and "start your server" in message
    assert "\n" not in message
    assert len(retries) == 2  # the preflight's short budget, not llm.max_retries


async def test_check_with_an_unknown_model_names_llm_model(chat, retries):
    chat.push(error(404, "The model `nope` does not exist."))
    with pytest.raises(LLMError, match=r"preflight \(llm.model=test-model\).*does not exist.*check llm.model"):
        await make_agent(chat.base_url).check()
    assert retries == []


def test_retry_policy_is_capped_full_jitter():
    policy = RetryPolicy(max_retries=10, backoff_base_s=0.5, backoff_max_s=4.0, retry_after_max_s=60.0)
    rng = random.Random(0)
    waits = [[policy.delay(n, None, rng) for _ in range(200)] for n in range(6)]
    for n, ws in enumerate(waits):
        bound = min(4.0, 0.5 * 2 ** n)
        assert all(0.0 <= w <= bound for w in ws)
        assert max(ws) > 0.8 * bound and min(ws) < 0.2 * bound  # spread over the whole range: full jitter
    assert policy.delay(0, 7.5, rng) == 7.5 and policy.delay(0, 600.0, rng) == 60.0 and policy.delay(0, -3, rng) == 0


@pytest.mark.parametrize(("overrides", "match"), [
    ({"model": None}, "llm.model=NAME"),
    ({"base_url": "127.0.0.1:8000"}, "llm.base_url"),
    ({"timeout_s": 0}, "llm.timeout_s"),
    ({"max_retries": -1}, "llm.max_retries"),
    ({"timeout_s": "soon"}, "numbers"),
    ({"prices": {"prompt": -1, "completion": 1}}, "negative"),
])
def test_bad_llm_config_is_a_config_error(overrides, match):
    with pytest.raises(ConfigError, match=match):
        OpenAIAgent({**llm("http://127.0.0.1:8000/v1"), **overrides})


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_turns": 0}, "agent.max_turns"),
    ({"max_turns": "8"}, "agent.max_turns"),
    ({"backoff_base_s": -1}, "agent.backoff_base_s"),
    ({"parallel_tool_calls": "yes"}, "agent.parallel_tool_calls"),
    ({"tool_choice": ""}, "agent.tool_choice"),
    ({"tool_choice": None}, "agent.tool_choice"),
])
def test_bad_agent_config_is_a_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        OpenAIAgent(llm("http://127.0.0.1:8000/v1"), **kwargs)


def test_agent_config_builds_from_the_llm_block(monkeypatch):
    cfg = compose_run_config(
        "agent=openai", "llm.model=Qwen/Qwen2.5-7B-Instruct", "llm.base_url=http://10.0.0.5:8000/v1/",
        "llm.prices.prompt=0.1", "llm.prices.completion=0.4")
    agent = instantiate(cfg.agent)  # as a worker builds it: from the plain, resolved dict
    assert isinstance(agent, OpenAIAgent) and agent.max_turns == 8
    assert agent.settings == LLMSettings(
        base_url="http://10.0.0.5:8000/v1", model="Qwen/Qwen2.5-7B-Instruct", api_key_env="OPENAI_API_KEY",
        timeout_s=120.0, max_retries=5, sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024},
        price_prompt=0.1, price_completion=0.4)
    missing = compose_run_config("agent=openai")
    with pytest.raises(ConfigError, match="llm.model=NAME"):
        OpenAIAgent(**{k: v for k, v in missing.agent.items() if k != "_target_"})


@pytest.mark.parametrize(("content", "expected"), [
    ("Kelmor", "Kelmor"),
    ("  Kelmor.  ", "Kelmor."),
    ("The passage says so.\nAnswer: Kelmor", "Kelmor"),
    ("**Final Answer:** **Kelmor**", "Kelmor"),
    ("answer: first\nFinal answer:\n\n1961", "1961"),
    (None, ""),
])
def test_extract_answer(content, expected):
    assert extract_answer(content) == expected


def test_split_thinking():
    assert split_thinking("<think>a</think> Kelmor") == ("Kelmor", "a")
    assert split_thinking("<think>a</think>x<think>b</think>") == ("x", "a\nb")
    assert split_thinking("<think>cut off mid-thought") == (None, "cut off mid-thought")
    assert split_thinking("plain") == ("plain", None) and split_thinking(None) == (None, None)


def test_runs_in_several_event_loops(chat, make_tools):
    """The driver's preflight runs in its own `asyncio.run`; the same agent must work in a later loop."""
    agent = make_agent(chat.base_url)
    asyncio.run(agent.check())
    result = asyncio.run(agent.run(QUESTION, make_tools(), EventLog("t")))
    assert result.prediction == "I don't know." and len(chat.chat_requests) == 2


async def test_a_repeat_s_seed_goes_with_every_request(chat, env):
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss born"})), answer("Answer: Kelmor"))
    events = EventLog("t1")
    result = await make_agent(chat.base_url).run(QUESTION, env.for_task("t1", events), events, seed=7)
    assert result.prediction == "Kelmor"
    assert [r.get("seed") for r in chat.chat_requests] == [7, 7]
    assert OpenAIAgent.deterministic is False
