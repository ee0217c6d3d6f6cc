"""Run folders for the export tests, made of real task records without a whole run.

A real `RolloutWorker` (outside Ray) runs the real `openai` agent against the scripted chat server
(tests/agents/chat_server.py) and a real gateway on loopback; its `TaskResult`s are appended to the folder's
trajectory as the driver appends them, the tool specs are listed as the driver lists them
(`offered_tools`) into tools.json, and config.yaml holds the agent's config. Each task's request bodies,
as the chat server received them, are kept: what the model was shown, to compare the exported rows with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pytest
from omegaconf import OmegaConf

from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.records import Question, TaskResult
from rollout.run.serving import offered_tools
from rollout.run.worker import EnvSpec, RolloutWorker
from rollout.run_folder import CONFIG_FILE, RunTools, append_task, trajectory_path, write_tools
from tests.agents.chat_server import (
    MODEL,
    ChatServer,
    Reply,
    answer,
    chat_server,
    error,
    overflow,
    tool_calls,
    unreadable_call,
)
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import sparse_kb

SPARSE = "query_knowledge_base_sparse"
SPARSE_ONLY = GATEWAYS_DIR / "rag_sparse_only.json"
SYSTEM_PROMPT = "You answer from a knowledge base; search it with query_knowledge_base_sparse."
OPENAI_AGENT = "rollout.agents.openai_agent.OpenAIAgent"

BORN = Question("q-born", "Where was Arlen Voss born?", ["Kelmor"], {"gold_doc_ids": ["d0"]})
CODE = Question("q-code", "Which company has the registry code ORG-5521?", ["Veltrix Holdings"])
CITY = Question("q-city", "In which country is Kelmor?", ["Dravia"])
CUT = Question("q-cut", "What does Veltrix Holdings make?", ["textile looms"])
BROKEN = Question("q-broken", "When was Arlen Voss born?", ["1961"])
LONG = Question("q-long", "Who founded Veltrix Holdings?", ["Arlen Voss"])
UNREAD = Question("q-unread", "Who holds registry ID P-92941?", ["Arlen Voss"])


@dataclass
class MadeRun:
    """A run folder and, per task id, the chat-completions request bodies its agent sent."""

    path: Path
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    tasks: dict[str, TaskResult] = field(default_factory=dict)


def openai_agent(base_url: str, **settings: Any) -> dict[str, Any]:
    """The `agent` config of an openai-agent run against the chat server at `base_url`."""
    llm = {"base_url": base_url, "model": MODEL, "api_key_env": "ROLLOUT_TEST_LLM_KEY", "timeout_s": 10,
           "max_retries": 0, "sampling": {"temperature": 0.0, "max_tokens": 256},
           "prices": {"prompt": None, "completion": None}}
    return {"_target_": OPENAI_AGENT, "llm": llm, "max_turns": 4, "backoff_base_s": 0.001, "backoff_max_s": 0.01,
            **settings}


def write_config(run_dir: Path, agent: dict[str, Any], mode: str = "sparse") -> None:
    """config.yaml as the driver writes it (the parts export reads)."""
    config = OmegaConf.to_yaml(OmegaConf.create({"mode_name": mode, "agent": agent}))
    (run_dir / CONFIG_FILE).write_text(config, encoding="utf-8")


def append_tasks(run_dir: Path, tasks: list[TaskResult]) -> None:
    with trajectory_path(run_dir).open("a", encoding="utf-8") as f:
        for task in tasks:
            append_task(f, task)


def make_run(run_dir: Path, chat: ChatServer, gateway_file: Path, agent: dict[str, Any],
             script: list[tuple[Question, list[Reply]]]) -> MadeRun:
    """Run each question with its scripted replies on a real worker, into a run folder."""
    run_dir.mkdir(parents=True)
    made = MadeRun(run_dir)
    with gateway_on_loopback(gateway_file, sparse_kb(), run_dir) as url:
        spec = EnvSpec(url, str(gateway_file), system_prompt=SYSTEM_PROMPT)
        specs, _ = offered_tools(spec)
        write_tools(run_dir, RunTools(specs, load_gateway_file(gateway_file).dynamic_toolsets))

        async def run_all() -> None:
            worker = RolloutWorker("w0", spec, agent)
            try:
                for question, replies in script:
                    chat.reset()
                    chat.push(*replies)
                    made.tasks[question.id] = await worker.run_task(question)
                    made.requests[question.id] = list(chat.chat_requests)
            finally:
                await worker.close()

        asyncio.run(run_all())
    append_tasks(run_dir, list(made.tasks.values()))
    write_config(run_dir, agent)
    return made


@pytest.fixture(scope="package")
def chat() -> Iterator[ChatServer]:
    with chat_server() as server:
        yield server


@pytest.fixture(scope="package")
def openai_run(chat, tmp_path_factory) -> MadeRun:
    """Seven openai-agent tasks on the sparse-only gateway: right with a search, wrong without one, cut at the
    token limit, failed by the endpoint, one whose first tool call the model wrote as broken JSON, one whose
    conversation outgrew the model's context window, and one whose second call its server could not read."""
    agent = openai_agent(chat.base_url, parallel_tool_calls=False)
    return make_run(tmp_path_factory.mktemp("export") / "openai", chat, SPARSE_ONLY, agent, [
        (BORN, [tool_calls((SPARSE, {"query": "Arlen Voss born", "top_k": 2})),
                answer("<think>The passage says Kelmor.</think>Answer: Kelmor")]),
        (CODE, [answer("Arlen Voss")]),
        (CUT, [tool_calls((SPARSE, {"query": "Veltrix"})), answer("Answer: textile", finish_reason="length")]),
        (CITY, [error(400, "scripted refusal")]),
        (BROKEN, [tool_calls((SPARSE, '{"query": "Arlen Voss')), tool_calls((SPARSE, {"query": "Arlen Voss"})),
                  answer("Answer: 1961")]),
        (LONG, [tool_calls((SPARSE, {"query": "Veltrix founder"})), overflow("vllm")]),
        (UNREAD, [tool_calls((SPARSE, {"query": "P-92941"})), unreadable_call()]),
    ])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def load(out: Path) -> list[dict[str, Any]]:
    """The rows as `datasets` gives them back (what TRL and OpenAI-format readers get)."""
    kind = "json" if out.suffix == ".jsonl" else "parquet"
    return list(datasets.load_dataset(kind, data_files=str(out), split="train"))


def sent(made: MadeRun, task_id: str) -> list[dict[str, Any]]:
    """What the model saw last in a task (the last request's messages), then what it answered."""
    return [*made.requests[task_id][-1]["messages"], made.tasks[task_id].messages[-1]]


def unpadded(value: Any, like: Any) -> Any:
    """`value` without the null fields Arrow gave it that `like` (the original) does not have."""
    if isinstance(value, dict) and isinstance(like, dict):
        return {k: unpadded(v, like.get(k)) for k, v in value.items() if k in like or v is not None}
    if isinstance(value, list) and isinstance(like, list) and len(value) == len(like):
        return [unpadded(v, w) for v, w in zip(value, like, strict=True)]
    return value
