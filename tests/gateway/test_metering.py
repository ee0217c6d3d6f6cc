"""Every tools/call result leaves the gateway with its accounting: the stage of its group and the tokens of the text
the client reads, by the gateway's tokenizer (also when only the structured content is sent, on errors and on
timeouts); the ledger line carries the same accounting."""

from __future__ import annotations

import json
import threading

import pytest
from mcp.client.client import Client

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway.tools import builtin_registry
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.run_folder import CALLS_FILE
from rollout.wire import META_ACCOUNTING, META_CALL_ID, META_OUTCOME, META_TEXT, TEXT_FROM_STRUCTURED, result_text
from tests.gateway.loopback import gateway_file

PASSAGES = [
    Passage("voss-0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961.", doc_id="voss"),
    Passage("voss-1", "Arlen Voss", "Voss founded the Kelmor glassworks and married a painter.", doc_id="voss"),
    Passage("veltrix", "Veltrix Holdings", "Veltrix Holdings makes textile looms. It was founded by Arlen Voss."),
    Passage("kelmor", "Kelmor", "Kelmor is a port city in Dravia with a glassworks."),
    Passage("dravia", "Dravia", "Dravia is a country on the northern sea; its capital is Merrow."),
]
GROUPS = {
    "query_knowledge_base_sparse": "rag_query_sparse",
    "search_documents": "rag_search",
    "retrieve_documents": "rag_retrieve_sparse",
    "chunk_documents": "rag_chunk",
    "generate_answer": "rag_generate",
}
STAGES = {
    "query_knowledge_base_sparse": "retrieval",
    "search_documents": "retrieval",
    "retrieve_documents": "retrieval",
    "chunk_documents": "chunking",
    "generate_answer": "generation",
}
CALLS = [
    ("query_knowledge_base_sparse", {"query": "Kelmor glassworks", "top_k": 3}),
    ("search_documents", {"query": "Voss Kelmor"}),
    ("retrieve_documents", {"query": "Who founded Veltrix Holdings?"}),
    ("chunk_documents", {"doc_ids": ["voss", "kelmor"], "token_limit": 40, "query": "glassworks"}),
    ("generate_answer", {"query": "Where was Arlen Voss born?", "doc_ids": ["voss"]}),
    ("chunk_documents", {"doc_ids": ["voss", "nope"]}),  # an error result
]
STRUCTURED_ONLY = {META_TEXT: TEXT_FROM_STRUCTURED}


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})


def _gateway(kb, collector=None):
    return build_gateway(gateway_file({"resource_type": "rag", "tool_groups": list(GROUPS.values())}), kb, collector)


async def _call_all(kb, meta, collector=None):
    async with Client(_gateway(kb, collector)) as client:
        return [await client.call_tool(name, args, meta={**meta, META_CALL_ID: f"c{i}"})
                for i, (name, args) in enumerate(CALLS)]


def test_the_stages_are_those_the_groups_declare():
    registry = builtin_registry()
    assert {tool: registry.group(group).stage for tool, group in GROUPS.items()} == STAGES


@pytest.mark.parametrize("meta", [{}, STRUCTURED_ONLY], ids=["full", "structured-only"])
async def test_context_tokens_count_the_text_the_client_reads(kb, meta):
    results = await _call_all(kb, meta)
    counter = kb.token_counter()
    for (name, _), result in zip(CALLS, results, strict=True):
        accounting = result.meta[META_ACCOUNTING]
        assert accounting["stage"] == STAGES[name]
        assert accounting["context_tokens"] == counter.count(result_text(result)) > 0, name
        assert (accounting["llm_prompt_tokens"], accounting["llm_completion_tokens"], accounting["llm_ms"]) == (0, 0, 0)
    assert results[-1].is_error and "unknown document ids: nope" in result_text(results[-1])
    assert not any(r.is_error for r in results[:-1])


async def test_a_result_sent_without_its_text_counts_as_many_tokens_as_the_full_one(kb):
    full = await _call_all(kb, {})
    once = await _call_all(kb, STRUCTURED_ONLY)
    sent_once = [name for (name, _), r in zip(CALLS, once, strict=True) if not r.content]
    # The typed results (a passage search, a document search, an answer) came without their text ...
    assert sent_once == ["query_knowledge_base_sparse", "search_documents", "generate_answer"]
    # ... and count the tokens of the text the client makes of them, the text the full result carries.
    for a, b in zip(full, once, strict=True):
        assert a.meta[META_ACCOUNTING] == b.meta[META_ACCOUNTING]


async def test_the_ledger_line_carries_the_results_accounting(kb, tmp_path):
    collector = StatsCollector(tmp_path)
    try:
        results = await _call_all(kb, STRUCTURED_ONLY, collector)
    finally:
        collector.close()
    lines = [json.loads(line) for line in (tmp_path / CALLS_FILE).read_text(encoding="utf-8").splitlines()]
    ledger = {line["call_id"]: line for line in lines}
    assert len(lines) == len(CALLS)
    for i, result in enumerate(results):
        assert ledger[f"c{i}"]["accounting"] == result.meta[META_ACCOUNTING]
    assert ledger[f"c{len(CALLS) - 1}"]["outcome"] != "ok"


async def test_a_timed_out_call_still_gets_its_accounting(kb, tmp_path):
    release = threading.Event()

    def slow_lookup(query: str) -> str:
        """Waits until the test is over."""
        release.wait(10)
        return "late"

    registry = ToolRegistry()
    registry.add("slow_group", slow_lookup, stage="retrieval")
    collector = StatsCollector(tmp_path)
    server = build_gateway(gateway_file({"resource_type": "rag", "tool_groups": ["slow_group"]}), kb, collector,
                           tool_timeout_s=0.2, registry=registry)
    try:
        async with Client(server) as client:
            result = await client.call_tool("slow_lookup", {"query": "x"}, meta={META_CALL_ID: "slow"})
    finally:
        release.set()
        collector.close()
    assert result.is_error and result.meta[META_OUTCOME] == "timeout"
    accounting = result.meta[META_ACCOUNTING]
    assert accounting["stage"] == "retrieval"
    assert accounting["context_tokens"] == kb.token_counter().count(result_text(result)) > 0
    [line] = [json.loads(line) for line in (tmp_path / CALLS_FILE).read_text(encoding="utf-8").splitlines()]
    assert line["outcome"] == "timeout" and line["accounting"] == accounting
