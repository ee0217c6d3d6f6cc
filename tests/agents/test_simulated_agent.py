"""The simulated agent: a fixed number of turns of a fixed think time, real tool calls, no model."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate

import rollout.agents.simulated as simulated_module
from envs import HttpMCPRagEnv
from rollout.agents.simulated import SimulatedAgent
from rollout.errors import ConfigError
from rollout.events import EventLog, LLMOutputEvent, ToolCallEvent, ToolResultEvent
from rollout.gateway_file import GATEWAYS_DIR
from rollout.run.config import compose_run_config
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import sparse_kb

DENSE = "query_knowledge_base_dense"
SPARSE = "query_knowledge_base_sparse"
CORPUS_INFO = "get_corpus_info"
LATENCY = 0.0123
"""A think time no other code sleeps, so the sleeps it causes can be picked out."""
QUESTION = "Where was Arlen Voss born?"


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Delays passed to asyncio.sleep while the test runs (the sleep itself is skipped)."""
    seen: list[float] = []
    real = asyncio.sleep

    async def spy(delay: float, result: Any = None) -> Any:
        seen.append(delay)
        return await real(0, result)

    monkeypatch.setattr(asyncio, "sleep", spy)
    return seen


async def _env_for(gateway: str, tmp_path: Path, task_id: str, events: EventLog):
    """A real environment on a real gateway serving the three-passage sparse knowledge base."""
    path = GATEWAYS_DIR / gateway
    with gateway_on_loopback(path, sparse_kb(), tmp_path) as url:
        async with HttpMCPRagEnv(url, path) as env:
            yield env.for_task(task_id, events)


@pytest.fixture
async def sparse_session(tmp_path):
    events = EventLog("t")
    async for session in _env_for("rag_sparse_only.json", tmp_path, "t", events):
        yield session, events


@pytest.fixture
async def no_tool_session(tmp_path):
    events = EventLog("t")
    async for session in _env_for("rag_no_tool.json", tmp_path, "t", events):
        yield session, events


async def test_turns_latency_and_tool_calls_through_a_real_gateway(sparse_session, sleeps):
    session, events = sparse_session
    result = await SimulatedAgent(llm_latency_s=LATENCY, turns=4).run(QUESTION, session, events)

    outputs = [e for e in events.events if isinstance(e, LLMOutputEvent)]
    assert [e.turn for e in outputs] == [1, 2, 3, 4]
    assert all(e.latency_ms == pytest.approx(LATENCY * 1000) for e in outputs)
    assert sleeps.count(LATENCY) == 4  # one think time per turn, the answering turn included
    assert [(c.name, c.arguments, c.outcome) for c in session.calls] == [(SPARSE, {"query": QUESTION}, "ok")] * 3
    assert sum(isinstance(e, ToolCallEvent) for e in events.events) == 3
    assert sum(isinstance(e, ToolResultEvent) for e in events.events) == 3
    assert [len(e.tool_calls) for e in outputs] == [1, 1, 1, 0]
    # The answer is read off the tool's first hit (passage d0's title), not the gold answer (Kelmor).
    assert session.calls[0].result_ids[0] == "d0"
    assert (result.prediction, result.turns, result.usage) == ("Arlen Voss", 4, {})
    assert [m["role"] for m in result.messages] == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert result.messages[-1] == {"role": "assistant", "content": "Arlen Voss"}
    assert outputs[-1].content == "Arlen Voss"


async def test_no_tool_gateway_answers_without_calls(no_tool_session, sleeps):
    session, events = no_tool_session
    assert session.tool_specs == []
    result = await SimulatedAgent(llm_latency_s=LATENCY, turns=3).run(QUESTION, session, events)
    assert session.calls == [] and not [e for e in events.events if isinstance(e, ToolCallEvent)]
    outputs = [e for e in events.events if isinstance(e, LLMOutputEvent)]
    assert [e.turn for e in outputs] == [1, 2, 3] and all(e.tool_calls == [] for e in outputs)
    assert sleeps.count(LATENCY) == 3
    assert (result.prediction, result.turns) == ("", 3)


async def test_one_turn_answers_at_once(make_tools, sleeps):
    tools = make_tools(SPARSE)
    events = EventLog("t")
    result = await SimulatedAgent(llm_latency_s=LATENCY, turns=1).run(QUESTION, tools, events)
    assert tools.calls == [] and result.turns == 1 and result.prediction == ""
    assert len(events.events) == 1 and sleeps.count(LATENCY) == 1


async def test_call_tools_false_thinks_without_calling(make_tools):
    tools = make_tools(SPARSE)
    events = EventLog("t")
    result = await SimulatedAgent(llm_latency_s=0, turns=3, call_tools=False).run(QUESTION, tools, events)
    assert tools.calls == [] and result.turns == 3
    assert [e.content for e in events.events] == ["(thinking)", "(thinking)", ""]


async def test_uses_the_first_tool_that_takes_a_query(make_tools):
    tools = make_tools(CORPUS_INFO, DENSE, SPARSE)
    await SimulatedAgent(llm_latency_s=0, turns=2).run(QUESTION, tools, EventLog("t"))
    assert tools.calls == [(DENSE, {"query": QUESTION})]


async def test_failing_tool_gives_an_empty_answer(make_tools):
    tools = make_tools(SPARSE, failing=[SPARSE])
    result = await SimulatedAgent(llm_latency_s=0, turns=3).run(QUESTION, tools, EventLog("t"))
    assert len(tools.calls) == 2 and result.prediction == ""


async def test_answers_come_from_tool_results_only(demo_kb, make_tools):
    """Over the demo questions, each prediction is the title of the first hit the tool returned."""
    for q in demo_kb[1][:20]:
        tools = make_tools(SPARSE)
        result = await SimulatedAgent(llm_latency_s=0, turns=2).run(q.question, tools, EventLog(q.id))
        first_hit = (await make_tools(SPARSE).call_tool(SPARSE, {"query": q.question})).structured["results"][0]
        assert result.prediction == first_hit["title"]


def test_never_imports_the_data_generator():
    tree = ast.parse(Path(simulated_module.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.startswith("rollout.data")]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"llm_latency_s": -0.1}, "agent.llm_latency_s"),
    ({"llm_latency_s": "fast"}, "agent.llm_latency_s"),
    ({"turns": 0}, "agent.turns"),
    ({"turns": 2.5}, "agent.turns"),
    ({"turns": True}, "agent.turns"),
    ({"call_tools": "yes"}, "agent.call_tools"),
])
def test_bad_config_is_a_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SimulatedAgent(**kwargs)


def _agent_spec(*overrides: str) -> dict[str, Any]:
    return compose_run_config("agent=simulated", *overrides).agent


def test_config_group_builds_the_agent():
    agent = instantiate(_agent_spec())
    assert isinstance(agent, SimulatedAgent)
    assert (agent.llm_latency_s, agent.turns, agent.call_tools) == (0.1, 3, True)
    with pytest.raises(InstantiationException) as info:
        instantiate(_agent_spec("agent.turns=0"))
    assert isinstance(info.value.__cause__, ConfigError)  # the driver reports the cause as one line
