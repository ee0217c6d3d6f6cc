"""The gateway driven in-memory by the real MCP client."""

import pytest
from mcp.client.client import Client

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.records import Passage
from rollout.report import build_tool_report, load_calls
from rollout.retrieval import BM25Retriever
from rollout.wire import META_CALL_ID, META_TASK_ID

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Veltrix Holdings", "Veltrix Holdings makes textile looms. Registry code ORG-5521."),
    Passage("d2", "Kelmor", "Kelmor is a city in Dravia."),
]


@pytest.fixture
def kb() -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})


async def test_lists_only_configured_tools(kb):
    server = build_gateway(load_gateway_file(GATEWAYS_DIR / "rag_sparse_only.json"), kb)
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == ["query_knowledge_base_sparse"]
    assert tools[0].meta["rollout/group"] == "rag_query_sparse"
    assert set(tools[0].input_schema["properties"]) == {"query", "top_k"}


async def test_search_returns_ranked_structured_passages(kb):
    server = build_gateway(load_gateway_file(GATEWAYS_DIR / "rag_sparse_only.json"), kb)
    async with Client(server) as client:
        result = await client.call_tool("query_knowledge_base_sparse", {"query": "ORG-5521 Dravia", "top_k": 3})
    assert not result.is_error
    hits = result.structured_content["results"]
    assert [h["rank"] for h in hits] == [1, 2]  # d0 shares no word with the query: not listed
    assert hits[0]["id"] == "d1" and hits[0]["title"] == "Veltrix Holdings" and hits[1]["id"] == "d2"


async def test_every_call_is_recorded_once_with_its_outcome(kb, tmp_path):
    collector = StatsCollector(tmp_path / "tool_stats")
    server = build_gateway(load_gateway_file(GATEWAYS_DIR / "rag_sparse_only.json"), kb, collector)
    calls = [
        ("query_knowledge_base_sparse", {"query": "Voss"}, "ok"),
        ("query_knowledge_base_sparse", {"query": "Voss", "top_k": "many"}, "invalid_arguments"),
        ("query_knowledge_base_sparse", {"query": "Voss", "top_k": 999}, "tool_error"),
        ("query_knowledge_base_sparse", {"top_k": 3}, "invalid_arguments"),
        ("query_knowledge_base_dense", {"query": "Voss"}, "unknown_tool"),
    ]
    async with Client(server) as client:
        for i, (name, args, _) in enumerate(calls):
            result = await client.call_tool(name, args, meta={META_CALL_ID: f"c{i}", META_TASK_ID: "t1"})
            assert result.is_error == (i > 0)
    collector.close()
    df = load_calls(tmp_path)
    assert df["call_id"].tolist() == [f"c{i}" for i in range(len(calls))]
    assert df["outcome"].tolist() == [c[2] for c in calls]
    assert df.loc[0, "result_ids"][0] == "d0"
    report = build_tool_report(tmp_path)
    assert report["summary"]["total_calls"] == 5 and report["summary"]["failed_calls"] == 4
    by_tool = {t["tool_name"]: t for t in report["tools"]}
    assert by_tool["query_knowledge_base_sparse"]["total_calls"] == 4
    assert by_tool["query_knowledge_base_sparse"]["success_calls"] == 1
    assert report["tasks"][0]["task_id"] == "t1"


async def test_argument_limits_come_back_as_errors(kb):
    server = build_gateway(load_gateway_file(GATEWAYS_DIR / "rag_sparse_only.json"), kb)
    async with Client(server) as client:
        empty = await client.call_tool("query_knowledge_base_sparse", {"query": "  "})
        long = await client.call_tool("query_knowledge_base_sparse", {"query": "x" * 5000})
    assert empty.is_error and "query is empty" in empty.content[0].text
    assert long.is_error and "limit is 2000" in long.content[0].text
