"""Environments against a real gateway over loopback HTTP."""

import json

import pytest

from envs import HttpMCPEnv, HttpMCPRagEnv
from envs.http_mcp_rag_env import keep_rag_modules
from rollout.errors import ConfigError, GatewayError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.records import Passage
from rollout.report import load_calls
from rollout.retrieval import BM25Retriever
from tests.conftest import gateway_on_loopback

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Kelmor", "Kelmor is a city in Dravia."),
    # A third passage: with two, BM25's idf is 0 for every word and no passage would match.
    Passage("d2", "Veltrix Holdings", "Veltrix Holdings makes textile looms."),
]
MIXED = GATEWAYS_DIR / "rag_mixed.json"


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    # Sparse only: the dense tool stays listed but answers with an error, which is what these tests need.
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})


def test_rag_env_drops_non_rag_modules():
    env = HttpMCPRagEnv("http://unused", MIXED)
    assert [m.resource_type for m in env.gateway_config.modules] == ["rag"]
    base = HttpMCPEnv("http://unused", MIXED)
    assert [m.resource_type for m in base.gateway_config.modules] == ["system", "rag", "vm_pyautogui"]


def test_missing_gateway_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="gateway file not found"):
        HttpMCPRagEnv("http://unused", tmp_path / "missing.json")


async def test_rag_env_offers_only_rag_tools_of_the_mixed_gateway(kb, tmp_path):
    with gateway_on_loopback(MIXED, kb, tmp_path) as url:
        async with HttpMCPRagEnv(url, MIXED, worker_id="w7") as env:
            names = [s["function"]["name"] for s in env.tool_specs]
        async with HttpMCPEnv(url, MIXED) as base:
            base_names = [t.name for t in base.tools]
    assert names == ["query_knowledge_base_dense", "query_knowledge_base_sparse"]
    assert base_names == ["get_corpus_info", *names]


async def test_calls_carry_ids_to_the_gateway_stats(kb, tmp_path):
    gateway_file = GATEWAYS_DIR / "rag_sparse_only.json"
    with gateway_on_loopback(gateway_file, kb, tmp_path) as url:
        async with HttpMCPRagEnv(url, gateway_file, worker_id="w3") as env:
            task = env.for_task("task-1")
            ok = await task.call_tool("query_knowledge_base_sparse", {"query": "Voss Dravia"})
            bad = await task.call_tool("query_knowledge_base_sparse", {"query": "Voss", "top_k": "lots"})
            refused = await task.call_tool("get_corpus_info", {})
    assert ok.ok and ok.structured["results"][0]["id"] == "d0"
    assert not bad.ok and "top_k" in bad.text
    assert not refused.ok and "offers query_knowledge_base_sparse" in refused.text
    assert [c.outcome for c in task.calls] == ["ok", "invalid_arguments", "unknown_tool"]
    assert task.calls[0].result_ids == ["d0", "d1"]  # d2 shares no word with the query: not listed
    assert task.calls[2].reached_gateway is False
    stats = load_calls(tmp_path)
    sent = [c for c in task.calls if c.reached_gateway]
    assert stats["call_id"].tolist() == [c.call_id for c in sent]
    assert set(stats["task_id"]) == {"task-1"} and set(stats["worker_id"]) == {"w3"}


async def test_training_traffic_and_step_reach_the_ledger_only_when_sent(kb, tmp_path):
    gateway_file = GATEWAYS_DIR / "rag_sparse_only.json"
    with gateway_on_loopback(gateway_file, kb, tmp_path) as url:
        async with HttpMCPRagEnv(url, gateway_file, traffic="train") as trainer:
            await trainer.call("query_knowledge_base_sparse", {"query": "Voss"}, "t-train", step=7)
            await trainer.call("query_knowledge_base_sparse", {"query": "Voss"}, "t-train")
        async with HttpMCPRagEnv(url, gateway_file) as evaluation:
            await evaluation.call("query_knowledge_base_sparse", {"query": "Voss"}, "t-eval")
    lines = [json.loads(line) for line in (tmp_path / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    assert [(line.get("traffic"), line.get("step")) for line in lines] == [("train", 7), ("train", None), (None, None)]
    assert "traffic" not in lines[2] and "step" not in lines[2]  # an evaluation's line is as it always was


async def test_unreachable_gateway_fails_to_start():
    env = HttpMCPRagEnv("http://127.0.0.1:9/mcp", GATEWAYS_DIR / "rag_sparse_only.json")
    with pytest.raises(GatewayError, match="Is the gateway running"):
        await env.start()


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        ([{"resource_type": "RAG", "tool_groups": ["rag_query", "rag_query_sparse"]}],
         r"module 1 has resource_type 'RAG' \(tool groups rag_query, rag_query_sparse\), did you mean 'rag'\?"),
        ([{"resource_type": "rag", "tool_groups": []}, {"resource_type": "system", "tool_groups": ["system_info"]}],
         r"module 2 has resource_type 'system' \(tool groups system_info\)\."),
    ],
)
def test_a_file_that_gives_the_rag_env_no_tool_is_an_error_naming_the_module(tmp_path, modules, expected):
    path = tmp_path / "gw.json"
    path.write_text(json.dumps({"server_name": "typo", "modules": modules}))
    with pytest.raises(ConfigError, match=expected) as e:
        HttpMCPRagEnv("http://unused", path)
    assert str(path) in str(e.value) and "resource type 'rag'" in str(e.value)
    with pytest.raises(ConfigError, match=expected):
        keep_rag_modules(load_gateway_file(path), path)  # what the driver calls before anything starts


def test_the_no_tool_baseline_file_is_kept():
    env = HttpMCPRagEnv("http://unused", GATEWAYS_DIR / "rag_no_tool.json")
    assert env.allowed_groups == []
