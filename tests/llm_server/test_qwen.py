"""Qwen2.5-Coder-0.5B-Instruct, a model trained to call tools, in the loop on llama.cpp's `llama-server --jinja`.

It writes its calls as its template asks, but without the `<tool_call>` tags, so this llama.cpp parses none and
returns them as text: `agent.text_tool_calls=parse` reads them. Sent `tool_choice: "required"`, it calls on its first
turn and then goes on in prose to `max_tokens` (the server's grammar lets text come first and forbids the end of the
reply until a call, which it never writes in the tags). Under Search-R1's protocol, on its own prompt, it mostly
answers at once or thinks without searching. llama-server sends a continued assistant message back ahead of what the
model wrote; the agent reads only what the model wrote, so the feedback's "between <search> and </search>" is not
taken for a search. At temperature 0 on one slot and one thread the replies are the same from run to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.agents.text_tool_calls import find_text_tool_calls
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from tests.demo_runs import SMALL_KB
from tests.llm_server.conftest import Served
from tests.llm_server.qwen import ALIAS
from tests.llm_server.test_real_server import SPARSE, read_jsonl

pytestmark = pytest.mark.slow

TASKS = ("mode=sparse", *SMALL_KB, "dataset.limit=2", "workers=1", f"llm.model={ALIAS}", "llm.sampling.max_tokens=64",
         "llm.sampling.temperature=0", "agent.max_turns=2", "llm.timeout_s=300")
"""Two questions of the small demo knowledge base, 64 tokens a reply, a turn for tools and one to answer."""
UNSEEN = "the tool results seem not to reach the model"


def qwen_run(served: Served, cache_dir: Path, folder: Path, *overrides: str) -> tuple[dict[str, Any], list[dict]]:
    """A run with Qwen on `served`; its evaluation summary and its tasks."""
    run(compose_run_config(*TASKS, f"llm.base_url={served.url}", f"output_dir={folder}", f"cache_dir={cache_dir}",
                           *overrides))
    return json.loads((folder / "evaluation_summary.json").read_text()), read_jsonl(folder / "trajectory.jsonl")


def gateway_calls(folder: Path) -> list[dict[str, Any]]:
    return read_jsonl(folder / "tool_stats" / "realtime_calls.jsonl")


def test_qwen_calls_its_tools_natively_and_in_search_r1s_tags(qwen_jinja, cache_dir, tmp_path, ray_local):
    # Native tool calls, required on the first turn, read from the text it writes: a task calls (the other writes
    # prose to max_tokens), each call reaches the gateway once, its results reach the model, and no final answer is
    # a call in any written form.
    native, tasks = qwen_run(qwen_jinja, cache_dir, tmp_path / "native", "agent=openai",
                             "agent.tool_choice=required", "agent.text_tool_calls=parse")
    assert native["n"] == 2 and all(t["status"] == "ok" for t in tasks)
    called = [t for t in tasks if t["tool_calls"]]
    assert called, [t["messages"] for t in tasks]
    assert sum(len(t["tool_calls"]) for t in tasks) == len(gateway_calls(tmp_path / "native"))
    assert not any(w.startswith(UNSEEN) for w in native["warnings"]), native["warnings"]
    assert all(find_text_tool_calls(t["prediction"], {SPARSE}) is None for t in tasks)
    first = [e for e in called[0]["events"] if e["type"] == "llm_output"][0]
    assert first["tool_calls"] and first["finish_reason"] == "length"  # a call, then prose to max_tokens

    # Search-R1's protocol on its own prompt: what it does is recorded as it is, its repeats counted once each.
    tagged, tasks = qwen_run(qwen_jinja, cache_dir, tmp_path / "tagged", "agent=search_r1", "agent.max_turns=3")
    assert tagged["n"] == 2 and all(t["status"] == "ok" for t in tasks)
    calls = [(c["name"], json.dumps(c["arguments"], sort_keys=True)) for t in tasks for c in t["tool_calls"]]
    assert len(calls) == len(gateway_calls(tmp_path / "tagged"))
    repeats = sum(len(c) - len(set(c)) for c in ([(x["name"], json.dumps(x["arguments"], sort_keys=True))
                                                     for x in t["tool_calls"]] for t in tasks))
    assert tagged["repeated_calls"]["count"] == repeats


def test_search_r1_reads_only_what_the_model_wrote_when_the_server_sends_the_continued_text_back(
        qwen_jinja, cache_dir, tmp_path, ray_local):
    # Eight tokens cut the first turn before any tag, so the second request continues the model's text and the
    # feedback, which names the tags ("between <search> and </search>"). llama-server sends that text back ahead
    # of what the model wrote; the turn is what the model wrote alone. docs/agents.md's repetition penalty goes
    # with every request.
    qwen_jinja.wire.clear()
    qwen_run(qwen_jinja, cache_dir, tmp_path / "cut", "agent=search_r1", "dataset.limit=1",
             "llm.sampling.max_tokens=8", "+llm.sampling.repeat_penalty=1.1")
    requests = qwen_jinja.wire.exchanges("/chat/completions")
    assert requests and all(e.request["repeat_penalty"] == 1.1 for e in requests)
    continued = [e for e in requests if e.request.get("continue_final_message")]
    assert continued
    [task] = read_jsonl(tmp_path / "cut" / "trajectory.jsonl")
    turns = [e["content"] for e in task["events"] if e["type"] == "llm_output"]
    for exchange, turn in zip(continued, turns[1:], strict=True):
        sent = exchange.request["messages"][-1]["content"]
        reply = exchange.response["choices"][0]["message"]["content"]
        wrote = reply[len(sent):] if reply.startswith(sent) else reply
        shown = min(len(wrote), len(turn))
        assert turn[:shown] == wrote[:shown], (sent, reply, turn)
