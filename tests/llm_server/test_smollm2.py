"""SmolLM2-135M-Instruct, a real trained model, in the loop: the setups docs/agents.md gives, as a user runs them.

The model is weak, but it writes as real models do. Served by llama-cpp-python with `--chat_format
chatml-function-calling` it calls tools (that server forces the call through a grammar) but never reads their results
(a `role: tool` message renders empty), and the run must say so. Served by llama.cpp's `llama-server --jinja` with a
template that knows tools, the same conversation's prompt holds what the tool returned. The same server judges a
run, and llama-cpp-python serves `agent=search_r1` on the completions wire with the model's own template. At
temperature 0 on one thread the replies are the same from run to run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout.llm.chat_template import load_chat_template
from rollout.report.cli import main as report_main
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from tests.demo_runs import SMALL_KB
from tests.llm_server.conftest import Served
from tests.llm_server.smollm2 import ALIAS
from tests.llm_server.test_real_server import SPARSE, read_jsonl, task_exchanges

pytestmark = pytest.mark.slow

TASKS = ("mode=sparse", *SMALL_KB, "dataset.limit=1", "workers=1", f"llm.model={ALIAS}", "llm.sampling.max_tokens=48")
"""One question of the small demo knowledge base, 48 tokens a reply."""
UNSEEN = "the tool results seem not to reach the model"
PASSAGES = " ".join(f"Passage {i}: the Veltrix archive records that Mara Quell founded Kelmor Works in {1900 + i}."
                    for i in range(12))
"""A tool result of about 250 tokens."""


def smol_run(served: Served, cache_dir: Path, folder: Path, *overrides: str) -> dict[str, Any]:
    """A run with SmolLM2 on `served` as its LLM; its evaluation summary. The proxy's log holds this run's exchanges."""
    served.wire.clear()
    run(compose_run_config(*TASKS, f"llm.base_url={served.url}", f"output_dir={folder}", f"cache_dir={cache_dir}",
                           *overrides))
    return json.loads((folder / "evaluation_summary.json").read_text())


def prompt_tokens_with_tool_result(served: Served, result: str) -> int:
    """The prompt tokens the server counts for a conversation whose last message is a search's `result`."""
    tools = [{"type": "function", "function": {"name": SPARSE, "description": "Search the knowledge base.",
                                               "parameters": {"type": "object", "required": ["query"],
                                                              "properties": {"query": {"type": "string"}}}}}]
    call = {"id": "call_1", "type": "function", "function": {"name": SPARSE, "arguments": '{"query": "Kelmor"}'}}
    messages = [{"role": "system", "content": "Answer with the search's help."},
                {"role": "user", "content": "Who founded Kelmor Works?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": result}]
    reply = httpx.post(f"{served.direct}/chat/completions", timeout=120, json={
        "model": ALIAS, "messages": messages, "tools": tools, "tool_choice": "auto", "max_tokens": 1,
        "temperature": 0})
    reply.raise_for_status()
    return reply.json()["usage"]["prompt_tokens"]


def test_smollm2s_tool_results_reach_it_through_llama_server_and_a_run_without_them_is_warned(
        smol_function_calling, smol_jinja, cache_dir, tmp_path, ray_local):
    # The wire: the same conversation, with a tool result of ~250 tokens and with an empty one.
    dropped = prompt_tokens_with_tool_result(smol_function_calling, PASSAGES) - \
        prompt_tokens_with_tool_result(smol_function_calling, "")
    rendered = prompt_tokens_with_tool_result(smol_jinja, PASSAGES) - prompt_tokens_with_tool_result(smol_jinja, "")
    assert dropped == 0  # llama-cpp-python's chatml-function-calling: the result is not in the prompt
    assert rendered > len(PASSAGES) / 8  # llama-server --jinja: it is (about a token per 4 characters)
    # A run on llama-cpp-python's function calling: real tool calls whose results never reach the model, and the
    # run says so.
    blind = smol_run(smol_function_calling, cache_dir, tmp_path / "blind", "agent=openai", "agent.max_turns=2")
    tasks = read_jsonl(tmp_path / "blind" / "trajectory.jsonl")
    assert sum(len(t["tool_calls"]) for t in tasks) == 1 and blind["n"] == 1
    assert any(w.startswith(UNSEEN) for w in blind["warnings"])
    # Judged by the same model on llama-server: every reply is a verdict or counted as unparsed, never a guess (the
    # 135M model echoes the list of grades; a reply naming several grades is no verdict).
    assert report_main(["judge", str(tmp_path / "blind"), "--base-url", smol_jinja.url, "--model", ALIAS,
                        "--max-tokens", "32"]) == 0
    [judgements] = list((tmp_path / "blind" / "judgements").glob("*.jsonl"))
    lines = read_jsonl(judgements)
    assert len(lines) == 1 and all(line["reply"] for line in lines)
    for line in lines:
        grades = set(re.findall(r"\b(NOT[ _]ATTEMPTED|INCORRECT|CORRECT)\b", line["reply"]))
        assert line["label"] in {"CORRECT", "INCORRECT", "NOT_ATTEMPTED", None}
        if len(grades) > 1:
            assert line["label"] is None


def test_search_r1_on_smollm2_reads_its_information_blocks(smol_function_calling, smollm2_gguf, cache_dir, tmp_path,
                                                          ray_local):
    smol_run(smol_function_calling, cache_dir, tmp_path / "run", "agent=search_r1", "agent.wire=completions",
             f"agent.chat_template={smollm2_gguf}", "agent.max_turns=2")
    tasks = read_jsonl(tmp_path / "run" / "trajectory.jsonl")
    assert len(tasks) == 1 and {t["status"] for t in tasks} == {"ok"}
    requests = task_exchanges(smol_function_calling, "/completions")
    instruction = tasks[0]["messages"][0]["content"]
    rendered = load_chat_template(smollm2_gguf).render([{"role": "user", "content": instruction}])
    assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert any(e.request["prompt"] == rendered for e in requests)
    # A search's passages are part of the next prompt, as text the model continues from.
    searched = [t for t in tasks if t["tool_calls"]]
    for task in searched:
        information = next(m["content"] for m in task["messages"]
                           if m["role"] == "user" and "<information>" in m["content"])
        assert any(information in e.request["prompt"] for e in requests)
    assert {c["name"] for t in searched for c in t["tool_calls"]} <= {"search", SPARSE}
