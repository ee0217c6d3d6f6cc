"""Typed results sent once (structured content only): the env reads the same answers as from the full result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envs import HttpMCPEnv
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import GatewayFile
from rollout.mcp_client.transport import mcp_client
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.run_folder import CALLS_FILE
from rollout.wire import META_TEXT, TEXT_FROM_STRUCTURED, classify_result, result_text
from tests.gateway.loopback import serving

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961. He founded Veltrix Holdings."),
    Passage("d1", "Kelmor", "Kelmor is a city in Dravia, on the river Oss."),
    Passage("d2", "Veltrix Holdings", "Veltrix Holdings makes textile looms. Registry code ORG-5521."),
    Passage("d3", "Dravia", "Dravia is a country; its capital is Merrow. Ünïcode name: Dravía."),
]
GATEWAY = {
    "server_name": "results-once",
    "modules": [
        {"resource_type": "system", "tool_groups": ["system_info"]},
        {"resource_type": "rag", "tool_groups": ["rag_query_sparse", "rag_search", "rag_recall"]},
    ],
}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("query_knowledge_base_sparse", {"query": "textile looms registry", "top_k": 3}),
    ("query_knowledge_base_sparse", {"query": "capital Merrow Dravía"}),
    ("query_knowledge_base_sparse", {"query": "nothing matches this"}),
    ("query_knowledge_base_sparse", {"query": "Voss", "top_k": "lots"}),  # invalid arguments: an error result
    ("search_documents", {"query": "Kelmor Dravia", "max_files": 2}),
    ("recall_documents", {"query": "Kelmor", "doc_ids": ["d1", "d0"]}),
    ("get_corpus_info", {}),
]


@pytest.fixture(params=["streamable-http", "sse"])
def gateway(request, tmp_path):
    gateway_file = GatewayFile.model_validate(GATEWAY)
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    collector = StatsCollector(tmp_path / "tool_stats")
    uv = make_uvicorn(build_gateway(gateway_file, kb, collector), transport=request.param)
    config = tmp_path / "gateway.json"
    config.write_text(gateway_file.model_dump_json(), encoding="utf-8")
    path = "/sse" if request.param == "sse" else "/mcp"
    try:
        with serving(uv) as base:
            yield f"{base}{path}", config, tmp_path / "tool_stats"
    finally:
        collector.close()


async def test_env_reads_the_same_text_and_ids_as_from_the_full_result(gateway):
    url, config, stats_dir = gateway
    async with mcp_client(url) as plain:  # the SDK's client, no META_TEXT: the full result, text and structured content
        full = [await plain.call_tool(name, args) for name, args in CALLS]
    async with HttpMCPEnv(url, config, worker_id="w1") as env:
        task = env.for_task("t1")
        got = [await task.call_tool(name, args) for name, args in CALLS]
    for (name, args), before, after, record in zip(CALLS, full, got, task.calls, strict=True):
        ok, outcome, error, ids = classify_result(before)
        assert after.ok is ok, (name, args)
        assert after.text == (error if error is not None else result_text(before)), (name, args)
        assert after.structured == (before.structured_content if ok else None), (name, args)
        assert (record.name, record.outcome, record.result_ids) == (name, outcome, ids)
    assert got[0].structured["results"] and got[1].structured["results"], "the searches must find passages"
    # The tool report's ledger records the same outcomes and ids for both clients' calls.
    ledger = [json.loads(line) for line in (stats_dir / CALLS_FILE).read_text(encoding="utf-8").splitlines()]
    fields = ("tool_name", "ok", "outcome", "result_ids", "error")
    plain_calls = [[r[f] for f in fields] for r in ledger if r["worker_id"] is None]
    env_calls = [[r[f] for f in fields] for r in ledger if r["worker_id"] == "w1"]
    assert len(env_calls) == len(CALLS) and env_calls == plain_calls


async def test_a_typed_result_comes_once_when_the_client_makes_the_text(gateway):
    url, _, _ = gateway
    meta = {META_TEXT: TEXT_FROM_STRUCTURED}
    async with mcp_client(url) as client:
        full = await client.call_tool("query_knowledge_base_sparse", {"query": "textile looms"})
        once = await client.call_tool("query_knowledge_base_sparse", {"query": "textile looms"}, meta=meta)
        # recall_documents builds its own CallToolResult (text not the JSON of its structured content): sent whole.
        recall = await client.call_tool("recall_documents", {"query": "Kelmor", "doc_ids": ["d1"]}, meta=meta)
    assert full.content and full.structured_content["results"]
    assert once.content == [] and (once.meta or {}).get(META_TEXT) == TEXT_FROM_STRUCTURED
    assert once.structured_content == full.structured_content
    assert result_text(once) == result_text(full)
    assert recall.content and (recall.meta or {}).get(META_TEXT) is None
