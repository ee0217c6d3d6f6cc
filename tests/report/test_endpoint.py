"""The summary's measure of the LLM endpoint: how many requests it served at once, from the requests' own timings.

The scripted chat server (tests/agents/chat_server.py) takes `generate_s` to write each reply, in one of its
`slots`: with one slot it answers one request at a time, as llama.cpp does without `--parallel`, and with `timings`
it says how long each request spent in its slot, as llama.cpp's server does. Three tasks run at once through the
real agent; what the line says depends on what the server did (which the delays fix), not on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from rollout.agents.openai_agent import OpenAIAgent
from rollout.events import EventLog, LLMOutputEvent
from rollout.records import Question, TaskResult, ToolResult
from rollout.report.endpoint import HINT, TRIM, UNTIMED, EndpointTally, endpoint_line, most_at_once
from rollout.report.printed import print_summary
from rollout.report.scoring import summarize
from rollout.summary import EndpointLoad, RunSummary
from tests.agents.chat_server import MODEL, ChatServer

TASKS = 3
GENERATE_S = 0.8
"""A reply's time: TRIM takes 200 ms off each server interval's ends, more than a loaded machine delays a reply's end."""
SEARCH = "query_knowledge_base_sparse"


class OneTool:
    """A search tool that finds the same passage for any query (the chat server answers with its first line)."""

    system_prompt = "Answer with the knowledge base."
    tool_specs = [{"type": "function", "function": {
        "name": SEARCH, "description": "Search.",
        "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}}}]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(True, "Kelmor\nArlen Voss was born in Kelmor.")


@pytest.fixture
def chat(server: ChatServer) -> ChatServer:
    server.reset()
    return server


async def run_tasks(chat: ChatServer) -> list[TaskResult]:
    """`TASKS` questions at once through agent=openai (a tool call, then an answer: two requests each)."""
    agent = OpenAIAgent({"base_url": chat.base_url, "model": MODEL, "api_key_env": None, "timeout_s": 30,
                         "max_retries": 0, "sampling": {"max_tokens": 64}}, max_turns=3)

    async def one(i: int) -> TaskResult:
        q, events = Question(f"q{i}", "Where was Arlen Voss born?", ["Kelmor"]), EventLog(f"q{i}")
        result = await agent.run(q.question, OneTool(), events)
        return TaskResult.answered(q, prediction=result.prediction, turns=result.turns, messages=result.messages,
                                   usage=result.usage, calls=[], events=events.events, worker_id="w", latency_s=0.0)

    try:
        return list(await asyncio.gather(*(one(i) for i in range(TASKS))))
    finally:
        await agent.client.aclose()


def measure(results: list[TaskResult]) -> EndpointLoad:
    tally = EndpointTally()
    for r in results:
        tally.add(r)
    load = tally.summary()
    assert load is not None and load.requests == 2 * TASKS
    return load


@pytest.mark.parametrize("timings", [True, False], ids=["llama.cpp timings", "no timings"])
async def test_a_one_slot_server_is_measured_at_one_request_at_a_time(chat, timings):
    chat.generate_s, chat.slots, chat.timings = GENERATE_S, 1, timings
    load = measure(await run_tasks(chat))

    assert load.sent_at_once == TASKS and load.timed_by_server is timings
    line = endpoint_line(load)
    if timings:
        assert line.endswith(f"({HINT})")
        assert load.served_at_once == 1 and load.queued_share is not None and load.queued_share > 0.3
        assert line.startswith(f"LLM endpoint: at most 1 request at a time served of {TASKS} sent concurrently; ")
        assert "of LLM time queued" in line
    else:  # from the client alone, one slot and several look alike: no number is made up
        assert load.served_at_once is None and load.queued_share is None
        assert line.startswith(f"LLM endpoint: {TASKS} requests sent concurrently; ")
        assert line.endswith(f"how many it served at once is not known: the server reports no timings ({UNTIMED})")
    # Every reply has 5 completion tokens, and the one slot writes one reply per GENERATE_S at most.
    assert load.completion_tokens_per_s is not None and load.completion_tokens_per_s <= 5 / GENERATE_S


@pytest.mark.parametrize("timings", [True, False], ids=["llama.cpp timings", "no timings"])
async def test_a_server_with_a_slot_per_request_serves_them_together(chat, timings):
    chat.generate_s, chat.slots, chat.timings = GENERATE_S, TASKS, timings
    load = measure(await run_tasks(chat))

    assert load.sent_at_once == TASKS
    if timings:
        assert load.served_at_once == TASKS and load.queued_share is not None and load.queued_share < 0.3
        assert endpoint_line(load).startswith(f"LLM endpoint: at most {TASKS} requests at a time served of {TASKS}")
    else:
        assert load.served_at_once is None
    assert HINT not in endpoint_line(load)


def test_touching_intervals_are_not_concurrent_and_a_blur_at_the_ends_is_not_either():
    start, end = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    assert most_at_once(start, end) == 1
    assert most_at_once(start, end + 0.05) == 2
    assert most_at_once(start, end + 0.05, TRIM) == 1  # each answer seen 50 ms late: still back to back
    assert most_at_once(np.array([0.0, 0.3, 0.6]), np.array([1.0, 1.3, 1.6]), TRIM) == 2
    assert most_at_once(np.array([0.0, 0.1, 0.2]), np.array([1.0, 1.1, 1.2]), TRIM) == 3


def test_the_summary_prints_the_line_and_keeps_the_measure(tmp_path):
    def llm(request_ms: float, server_ms: float) -> LLMOutputEvent:
        return LLMOutputEvent(turn=1, content="x", usage={"completion_tokens": 100}, latency_ms=request_ms,
                              sent=100.0, request_ms=request_ms, server_ms=server_ms)

    q = Question("q", "?", ["a"])
    # Two requests sent together; the server worked on the second (550 ms queued) once the first was done.
    records = [TaskResult.answered(q, prediction="a", turns=1, messages=[], usage={}, calls=[], worker_id="w",
                                   latency_s=1.0, events=[llm(500.0, 500.0)]),
               TaskResult.answered(q, prediction="a", turns=1, messages=[], usage={}, calls=[], worker_id="w",
                                   latency_s=1.0, events=[llm(1000.0, 450.0)], repeat=1),
               TaskResult.answered(q, prediction="a", turns=1, messages=[], usage={}, calls=[], worker_id="w",
                                   latency_s=1.0, events=[LLMOutputEvent(turn=1, content="offline")], repeat=2)]
    summary = summarize(records, mode="m", gateway_file="g", wall_time_s=1.0)

    assert summary.llm_endpoint == EndpointLoad(requests=2, sent_at_once=2, served_at_once=1.0, timed_by_server=True,
                                                completion_tokens_per_s=200.0, queued_share=0.3667)
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json()))).llm_endpoint == summary.llm_endpoint
    console = Console(record=True, width=400)
    print_summary(summary, tmp_path, console)
    assert ("LLM endpoint: at most 1 request at a time served of 2 sent concurrently; 200 completion tokens/s; ~37% of "
            f"LLM time queued ({HINT})") in console.export_text()
    assert summarize(records[2:], mode="m", gateway_file="g", wall_time_s=1.0).llm_endpoint is None
