"""What the summary advises for tasks that ran out of the model's context window: the reply's token limit when the
model's own output filled it (a reply that ran to the window, replies that outgrew the tool results, a completion
budget that took the room), fewer turns or passages when the tools' results did. Each conversation is the
`agent=openai` loop's against the scripted server, refused as each server refuses it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout.agents.openai_agent import OpenAIAgent
from rollout.events import EventLog
from rollout.records import Question, TaskResult, ToolResult
from rollout.report.rescore import RunFacts, ScoringConfig, score_folder
from rollout.report.scoring import summarize
from tests.agents.chat_server import ChatServer, chat_server, overflow, tool_calls, usage

SEARCH = "query_knowledge_base_sparse"
PASSAGE = "Kelmor is a city in Dravia, on the river Velt. " * 4
"""About 190 characters: one passage a search."""


class Tools:
    """One search tool whose every result is `passages` copies of `PASSAGE`."""

    def __init__(self, passages: int) -> None:
        self.passages = passages

    @property
    def system_prompt(self) -> str:
        return "Answer the question; search the knowledge base with the tool offered."

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {
            "name": SEARCH, "description": "Sparse Search: keyword matching (BM25) over the knowledge base.",
            "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}}}]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(True, "\n\n".join([PASSAGE] * self.passages))


@pytest.fixture(scope="module")
def server():
    with chat_server() as s:
        yield s


@pytest.fixture
def chat(server: ChatServer) -> ChatServer:
    server.reset()
    return server


async def overflowed(chat: ChatServer, tools: Tools, qid: str = "q1", **llm: Any) -> TaskResult:
    """One task of the agent against the server's script, recorded as the worker records it."""
    agent = OpenAIAgent({"base_url": chat.base_url, "model": "test-model", "max_retries": 0, **llm}, max_turns=4)
    events = EventLog(qid)
    result = await agent.run("Where was Arlen Voss born?", tools, events)
    assert result.out_of_context
    return TaskResult.answered(
        Question(qid, "Where was Arlen Voss born?", ["Kelmor"]), prediction=result.prediction, turns=result.turns,
        messages=result.messages, usage=result.usage, calls=[], events=events.events, worker_id="w0", latency_s=0.1,
        out_of_context=True, stop_message=result.stop_message)


def context_warning(*tasks: TaskResult) -> str:
    [line] = [w for w in summarize(tasks, mode="sparse", gateway_file="g.json", wall_time_s=1.0).warnings
              if "context window" in w]
    return line


def search(content: str | None = None, **reply: Any):
    return tool_calls((SEARCH, {"query": "Arlen Voss birthplace"}), content=content, **reply)


async def test_a_reply_that_ran_to_the_window_names_the_replys_token_limit(chat):
    # vLLM with no max_tokens: the reply (its thinking, mostly) ran until 1,400 of the 1,500 tokens were spent, and
    # the conversation it left is refused. Five passages came back, more text than the model's visible reply.
    chat.push(search("Let me search.", finish_reason="length", tokens=usage(prompt=90, completion=1400)),
              overflow("vllm_new"))
    line = context_warning(await overflowed(chat, Tools(passages=5)))
    assert "the model's own output filled it" in line and "llm.sampling.max_tokens" in line
    assert "agent.max_turns" not in line and "top_k" not in line


async def test_replies_that_outgrew_the_tool_results_name_the_replys_token_limit(chat):
    # llama.cpp's refusal names no split: the conversation says the model's replies grew it, not the one passage a
    # search returned.
    rambling = "I should think about where Arlen Voss might have been born before I search again. " * 20
    chat.push(search(rambling), search(rambling), overflow("llama_cpp"))
    line = context_warning(await overflowed(chat, Tools(passages=1)))
    assert "the model's own output filled it" in line and "llm.sampling.max_tokens" in line
    assert "agent.max_turns" not in line


async def test_a_completion_budget_that_takes_the_window_names_the_replys_token_limit(chat):
    # llm.context_window's own check: the prompt stays short, max_tokens asks for most of the window.
    result = await overflowed(chat, Tools(passages=1), context_window=1000, sampling={"max_tokens": 900})
    assert "900 for the completion), over llm.context_window=1000: not sent" in (result.stop_message or "")
    line = context_warning(result)
    assert "the model's own output filled it" in line and "agent.max_turns" not in line


async def test_tool_results_that_filled_the_window_name_fewer_turns_or_passages(chat):
    chat.push(search(), search(), overflow("llama_cpp"))
    line = context_warning(await overflowed(chat, Tools(passages=5)))
    assert "own output" not in line and "agent.max_turns" in line and "gateway.default_top_k" in line


async def test_a_run_with_both_causes_names_each_with_its_share(chat, tmp_path):
    rambling = "I should think about where Arlen Voss might have been born before I search again. " * 20
    chat.push(search(rambling), search(rambling), overflow("llama_cpp"))
    own = await overflowed(chat, Tools(passages=1), "q1")
    chat.push(search(), search(), overflow("llama_cpp"))
    retrieved = await overflowed(chat, Tools(passages=5), "q2")
    line = context_warning(own, retrieved)
    assert line.startswith("2 of 2 tasks ran out of the model's context window")
    assert "in 1 of them the model's own output filled it" in line and "llm.sampling.max_tokens" in line
    assert "agent.max_turns" in line
    # Scored from the run folder, as the run and `rollout report rescore` score it: the messages and events are read.
    (tmp_path / "trajectory.jsonl").write_text("".join(json.dumps(t.to_json()) + "\n" for t in (own, retrieved)),
                                               encoding="utf-8")
    summary = score_folder(tmp_path, ScoringConfig(mode="sparse", gateway_file="g.json"), RunFacts(wall_time_s=1.0))
    assert line in summary.warnings


def test_a_run_without_overflows_says_nothing_of_context():
    task = TaskResult.answered(Question("q1", "?", ["Kelmor"]), prediction="Kelmor", turns=1, messages=[], usage={},
                               calls=[], events=[], worker_id="w0", latency_s=0.1)
    assert not [w for w in summarize([task], mode="sparse", gateway_file="g.json", wall_time_s=1.0).warnings
                if "context" in w]
