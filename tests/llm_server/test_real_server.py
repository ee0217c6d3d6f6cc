"""Whole runs against a real inference server: llama-cpp-python serving the tiny random-weight model.

The model's answers are noise, so these tests check the wire, not the answers: what rollout sends (tools, stop
strings, the prompt built from the model's own chat template), that the server's replies reach the records (usage,
finish_reason, its refusal of an over-long conversation), and that every task ends with a record. One server per
context window for the session: 4096 tokens for the runs, 512 for the conversation that does not fit.

What llama-cpp-python 0.3.36 does with `--chat_format chatml-function-calling`, as seen here (the first test pins
what the runs depend on):

- `tool_choice` omitted is `"none"`: the tools are left out of the prompt (the same prompt tokens as without
  them), which is why rollout says `"auto"` outright. `"required"` is HTTP 500 with an empty message. `"auto"` and a
  named function force the call through a grammar and pass no `max_tokens` on: a random model would write its
  arguments for minutes, the tiny model closes them at once (tests/llm_server/tiny_model.py), so `agent=openai` makes
  real native tool calls here.
- A prompt that does not fit (the prompt alone at least `--n_ctx`; a `max_tokens` past the window is cut to it) is
  HTTP 400 in OpenAI's shape, `code: context_length_exceeded`, on /v1/chat/completions and /v1/completions alike.
- A reply cut at `max_tokens` has `finish_reason: "length"`; no choice names the stop string that ended it.
- The model name in a request is not checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout.agents.openai_agent import PROBE_PROMPT
from rollout.llm.chat_template import load_chat_template
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run.outcome import RunOutcome
from tests.demo_runs import SMALL_KB
from tests.llm_server.conftest import LlamaServers, Served
from tests.llm_server.wire_log import Exchange

pytestmark = pytest.mark.slow

WIDE, NARROW = 4096, 512
"""The context windows served: one the tool preamble and a few turns fit in, one a long system prompt does not."""
TASKS = ("dataset.limit=3", "workers=1", "concurrency_per_worker=3", "llm.sampling.max_tokens=8")
"""Three questions of the small demo knowledge base at once on one actor, eight tokens a reply."""
SPARSE = "query_knowledge_base_sparse"
SEARCH_R1_STOP = ["</search>", "</answer>"]
LONG_SYSTEM_PROMPT = "Read every passage twice and answer with the shortest exact span you find. " * 50
"""About 700 tokens: over the narrow window before any question is added."""
OVERFLOW = "This model's maximum context length is 512 tokens. However, you requested"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_against(served: Served, cache_dir: Path, folder: Path, *overrides: str) -> RunOutcome:
    """A run of `overrides` with the served model as its LLM; the proxy's log holds this run's exchanges only."""
    served.wire.clear()
    cfg = compose_run_config("mode=sparse", *SMALL_KB, *TASKS, f"llm.base_url={served.url}", "llm.model=tiny",
                             f"output_dir={folder}", f"cache_dir={cache_dir}", *overrides)
    return run(cfg)


def task_exchanges(served: Served, path: str) -> list[Exchange]:
    """The run's requests to `path` but the preflights (one token asked; one tool offered to see how calls come
    back)."""
    return [e for e in served.wire.exchanges(path) if e.request.get("max_tokens") != 1 and not _probe(e)]


def _probe(exchange: Exchange) -> bool:
    messages = exchange.request.get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith(PROBE_PROMPT.format(name=SPARSE))


def test_the_server_s_replies_are_what_the_runs_rely_on(llama_servers: LlamaServers):
    url = llama_servers.get(NARROW).direct
    tools = [{"type": "function", "function": {"name": SPARSE, "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Where was Arlen Voss born?"}], "max_tokens": 8}
    with httpx.Client(timeout=120) as client:
        plain = client.post(f"{url}/chat/completions", json=chat).json()
        # tool_choice omitted and "none" alike: the tools are not in the prompt.
        for choice in ({}, {"tool_choice": "none"}):
            offered = client.post(f"{url}/chat/completions", json={**chat, "tools": tools, **choice}).json()
            assert offered["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
            assert offered["choices"][0]["message"].get("tool_calls") is None
        required = client.post(f"{url}/chat/completions", json={**chat, "tools": tools, "tool_choice": "required"})
        assert required.status_code == 500
        assert required.json() == {"error": {"message": "", "type": "internal_server_error", "param": None,
                                             "code": None}}
        # Cut at max_tokens: finish_reason "length", and nothing names a stop string.
        [cut] = plain["choices"]
        assert cut["finish_reason"] == "length" and plain["usage"]["completion_tokens"] == 8
        assert not {"stop_reason", "matched_stop"} & set(cut)
        # A prompt over the window: HTTP 400, OpenAI's shape and code, on both paths. Its count adds max_tokens.
        long = "word " * 700
        for path, body, counted in (
                ("/chat/completions", {**chat, "messages": [{"role": "user", "content": long}]}, "in the messages"),
                ("/completions", {"model": "tiny", "prompt": long, "max_tokens": 8}, "in your prompt")):
            refused = client.post(f"{url}{path}", json=body)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert {k: error[k] for k in ("type", "param", "code")} == {
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
            assert error["message"].startswith("This model's maximum context length is 512 tokens")
            assert counted in error["message"]
        # A max_tokens past the window is cut to it, not refused.
        long_reply = client.post(f"{url}/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 600}).json()
        assert long_reply["choices"][0]["finish_reason"] == "length" and long_reply["usage"]["total_tokens"] == NARROW


def test_agent_openai_runs_every_task_against_the_server(llama_servers, cache_dir, tmp_path, ray_local):
    served = llama_servers.get(WIDE)
    outcome = run_against(served, cache_dir, tmp_path / "run", "agent=openai", "agent.max_turns=2")
    assert outcome.ran == {"ok": 3}
    tasks = read_jsonl(tmp_path / "run" / "trajectory.jsonl")
    assert len({t["id"] for t in tasks}) == 3
    # The tool-parser preflight: the server called the offered tool natively, so the run went on.
    [probe] = [e for e in served.wire.exchanges("/chat/completions") if _probe(e)]
    assert probe.request["tool_choice"] == "auto" and probe.response["choices"][0]["message"]["tool_calls"]
    requests = task_exchanges(served, "/chat/completions")
    # Two requests a task: tools offered with tool_choice "auto" (the server parses the call it forced), then the
    # answering turn with "none".
    assert len(requests) == sum(t["turns"] for t in tasks) == 6
    assert sorted(e.request["tool_choice"] for e in requests) == ["auto"] * 3 + ["none"] * 3
    for exchange in requests:
        assert exchange.status == 200
        assert [s["function"]["name"] for s in exchange.request["tools"]] == [SPARSE]
        assert exchange.request["model"] == "tiny"
    called = [c for e in requests for c in e.response["choices"][0]["message"].get("tool_calls") or []]
    assert len(called) == 3 and {c["function"]["name"] for c in called} == {SPARSE}
    assert sorted(c["arguments"]["query"] for t in tasks for c in t["tool_calls"]) == ["", "", ""]
    # The server's token counts are the records' usage, and a reply cut at max_tokens is flagged.
    answered = [e.response for e in requests]
    assert sum(t["usage"]["prompt_tokens"] for t in tasks) == sum(r["usage"]["prompt_tokens"] for r in answered)
    assert all(t["usage"]["prompt_tokens"] > 0 and t["usage"]["completion_tokens"] > 0 for t in tasks)
    answers = [e.response for e in requests if e.request["tool_choice"] == "none"]
    assert sorted(t["truncated"] for t in tasks) == sorted(r["choices"][0]["finish_reason"] == "length"
                                                           for r in answers)
    # The gateway's ledger holds each call the server returned once.
    sent = sorted(c["call_id"] for t in tasks for c in t["tool_calls"] if c["reached_gateway"])
    ledger = read_jsonl(tmp_path / "run" / "tool_stats" / "realtime_calls.jsonl")
    assert len(sent) == 3 and sorted(row["call_id"] for row in ledger) == sent
    report = json.loads((tmp_path / "run" / "tool_stats" / "report.json").read_text())
    assert report["summary"]["total_calls"] == len(sent)
    assert json.loads((tmp_path / "run" / "evaluation_summary.json").read_text())["n"] == 3


def test_a_conversation_over_the_window_ends_out_of_context_and_is_scored(llama_servers, cache_dir, tmp_path,
                                                                        ray_local):
    served = llama_servers.get(NARROW)
    run_against(served, cache_dir, tmp_path / "run", "agent=openai", f"system_prompt='{LONG_SYSTEM_PROMPT}'")
    # The wire: each task's first request is refused as too long, in OpenAI's shape, and not retried.
    refused = task_exchanges(served, "/chat/completions")
    assert len(refused) == 3
    for exchange in refused:
        assert exchange.status == 400
        assert set(exchange.response) == {"error"}
        error = exchange.response["error"]
        assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
        assert error["message"].startswith(OVERFLOW) and "in the messages" in error["message"]
    # The record: the agent met its model's window, an outcome scored as a wrong answer, not an error.
    tasks = read_jsonl(tmp_path / "run" / "trajectory.jsonl")
    assert [(t["status"], t["prediction"], t["out_of_context"]) for t in tasks] == [("ok", "", True)] * 3
    summary = json.loads((tmp_path / "run" / "evaluation_summary.json").read_text())
    assert summary["out_of_context"] == 3 and summary["n"] == 3 and summary["metrics"]["exact_match"] == 0.0


@pytest.mark.parametrize("wire", ["chat", "completions"])
def test_search_r1_speaks_both_wires_to_the_server(wire, llama_servers, tiny_gguf, cache_dir, tmp_path, ray_local):
    served = llama_servers.get(WIDE)
    template = [f"agent.chat_template={tiny_gguf}"] if wire == "completions" else []
    outcome = run_against(served, cache_dir, tmp_path / "run", "agent=search_r1", f"agent.wire={wire}", *template)
    tasks = read_jsonl(tmp_path / "run" / "trajectory.jsonl")
    assert len({t["id"] for t in tasks}) == 3 and sum(outcome.ran.values()) == 3
    assert {t["status"] for t in tasks} <= {"ok"} and all(t["usage"]["total_tokens"] > 0 for t in tasks)
    path, other = ("/chat/completions", "/completions") if wire == "chat" else ("/completions", "/chat/completions")
    requests = task_exchanges(served, path)
    assert not served.wire.exchanges(other)
    assert len(requests) == sum(t["turns"] for t in tasks) >= 3
    assert all(e.status == 200 and e.request["stop"] == SEARCH_R1_STOP for e in requests)
    instruction = tasks[0]["messages"][0]["content"]
    assert instruction.startswith("Answer the given question.")
    if wire == "chat":
        # A task's first request is [user]; later ones continue the assistant's text.
        for e in requests:
            continuing = len(e.request["messages"]) > 1
            assert e.request["messages"][0] == {"role": "user", "content": e.request["messages"][0]["content"]}
            assert e.request.get("continue_final_message", False) is continuing
            assert e.request.get("add_generation_prompt", True) is not continuing
        assert any(len(e.request["messages"]) > 1 for e in requests)
    else:
        # The prompt is the model's own template (read from the GGUF) around the instruction, then the text so far.
        rendered = load_chat_template(tiny_gguf).render([{"role": "user", "content": instruction}])
        assert rendered.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
        assert any(e.request["prompt"] == rendered for e in requests)
        assert all(e.request["prompt"].startswith("<|im_start|>system\n") for e in requests)
