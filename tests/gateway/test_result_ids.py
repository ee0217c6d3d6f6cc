"""Result ids: every shipped tool's calls record the ids of what it returned, or none, in the gateway's ledger and
in the client's record alike; never a made-up id such as "None"."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_args

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from envs import HttpMCPEnv
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.tools import builtin_registry
from rollout.gateway_file import GatewayFile
from rollout.jsonl import read_jsonl
from rollout.retrieval import load_or_build_indexes
from rollout.wire import Hit, result_hits, result_ids
from tests.gateway.loopback import gateway_file, gateway_served, serving, upstream_on_loopback
from tests.gateway.test_pipeline_tools import FOUNDER, PASSAGES

PASSAGE_DOC = {p.id: p.source_id for p in PASSAGES}
"""Passage id → its document ("voss" is chunked into voss-0..2; the others are documents of one passage)."""
DOCS = set(PASSAGE_DOC.values())
SCORED = ["veltrix", "voss", "orchards"]


def rag(*groups: str) -> dict[str, Any]:
    return {"resource_type": "rag", "tool_groups": list(groups)}


ARMS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    # Each tool name is served once per gateway, so the index variants of a tool need gateways of their own.
    "sparse": ([rag("rag_query_sparse", "rag_search", "rag_recall", "rag_retrieve_sparse", "rag_filter", "rag_chunk",
                    "rag_generate", "rag_sources", "rag_visualize"),
                {"resource_type": "system", "tool_groups": ["system_info"]}], {}),
    "dense": ([rag("rag_query", "rag_search_dense", "rag_recall_dense", "rag_retrieve_dense")], {}),
    "hybrid": ([rag("rag_query_hybrid", "rag_search_hybrid", "rag_recall_hybrid", "rag_retrieve_hybrid")], {}),
    "toolsets": ([rag("rag_query_sparse")], {"dynamic_toolsets": True}),
    "browsecomp": ([rag("bcp_search_bm25", "bcp_search_dense", "bcp_get_document")], {}),
    "browsecomp_one": ([rag("bcp_dense")], {}),
}
CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "sparse": [
        ("query_knowledge_base_sparse", {"query": FOUNDER}),
        ("search_documents", {"query": FOUNDER}),
        ("recall_documents", {"query": FOUNDER, "max_tokens": 400}),
        ("retrieve_documents", {"query": FOUNDER}),
        ("filter_documents", {"query": FOUNDER, "doc_ids": SCORED, "relevance_threshold": 9}),
        ("chunk_documents", {"doc_ids": ["voss", "veltrix"], "query": FOUNDER, "token_limit": 400}),
        ("generate_answer", {"query": FOUNDER, "doc_ids": ["veltrix"]}),
        ("search_sources", {"query": FOUNDER}),
        ("visualize_doc_relevance", {}),
        ("get_corpus_info", {}),
    ],
    "dense": [("query_knowledge_base_dense", {"query": FOUNDER}), ("search_documents", {"query": FOUNDER}),
              ("recall_documents", {"query": FOUNDER, "max_tokens": 400}), ("retrieve_documents", {"query": FOUNDER})],
    "hybrid": [("query_knowledge_base_hybrid", {"query": FOUNDER}), ("search_documents", {"query": FOUNDER}),
               ("recall_documents", {"query": FOUNDER, "max_tokens": 400}), ("retrieve_documents", {"query": FOUNDER})],
    "toolsets": [("list_toolsets", {}), ("activate_toolset", {"names": ["rag_query_sparse"]}),
                 ("deactivate_toolset", {"names": "rag_query_sparse"})],
    "browsecomp": [("search_bm25", {"query": FOUNDER}), ("search_dense", {"query": FOUNDER}),
                   ("get_document", {"docid": "voss"})],
    "browsecomp_one": [("search", {"query": FOUNDER})],
}
PASSAGE_TOOLS = {"query_knowledge_base_sparse", "query_knowledge_base_dense", "query_knowledge_base_hybrid",
                 "recall_documents", "chunk_documents"}
"""Tools whose items are passages: ids are passage ids, doc ids their documents."""
DOCUMENT_TOOLS = {"search_documents", "retrieve_documents", "search_sources", "filter_documents", "search",
                  "search_bm25", "search_dense", "get_document"}
"""Tools whose items are documents: ids and doc ids are the same document ids."""


@pytest.fixture(scope="module")
def kb(cache_dir):
    indexes = load_or_build_indexes(PASSAGES, cache_dir, which=["hybrid"])
    yield KnowledgeBase(PASSAGES, indexes)
    indexes["dense"].close()


def notes_upstream() -> MCPServer:
    """An upstream whose tool returns a list (the SDK wraps it as `result`) of items, some without an id."""
    server = MCPServer("notes", log_level="WARNING")

    @server.tool()
    def notes() -> list[dict[str, Any]]:
        """List the notes."""
        return [{"id": "n1", "text": "kept"}, {"text": "no id"}, {"id": None, "text": "null id"}, {"doc_id": 7}]

    return server


async def _walk(env: HttpMCPEnv, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    records = []
    async with env:
        for name, arguments in calls:
            result, record = await env.call(name, arguments, task_id="t1")
            assert result.ok, (name, result.text)
            records.append(record)
    return records


def _ledger(run_dir) -> dict[str, list[str]]:
    return {line["call_id"]: line["result_ids"] for line in read_jsonl(run_dir / "tool_stats" / "realtime_calls.jsonl")}


async def test_every_shipped_tool_records_the_ids_it_returned(kb, tmp_path):
    records = []
    for arm, (modules, options) in ARMS.items():
        gw = GatewayFile.model_validate({"server_name": f"gw-{arm}", "modules": modules, **options})
        path = tmp_path / f"{arm}.json"
        path.write_text(gw.model_dump_json())
        with gateway_served(gw, kb, tmp_path / arm) as base:
            walked = await _walk(HttpMCPEnv(f"{base}/mcp", path, worker_id="w1"), CALLS[arm])
        ledger = _ledger(tmp_path / arm)
        for record in walked:  # the gateway's record of each call holds the ids the client's holds
            assert ledger[record.call_id] == record.result_ids, record.name
        records += walked
    shipped = {fn.__name__ for g in builtin_registry().group_names for fn in builtin_registry().group(g).tools}
    assert {r.name for r in records} == shipped  # a tool added later needs a call here

    for r in records:
        assert "None" not in r.result_ids and len(r.result_doc_ids) == len(r.result_ids), r
        if r.name in PASSAGE_TOOLS:
            assert r.result_ids and [PASSAGE_DOC[i] for i in r.result_ids] == r.result_doc_ids, r
        elif r.name in DOCUMENT_TOOLS:
            assert r.result_ids and set(r.result_ids) <= DOCS and r.result_doc_ids == r.result_ids, r
        else:  # an answer, a chart, tool sets, corpus facts: no items
            assert r.result_ids == [] and r.result_doc_ids == [], r
    by_name = {r.name: r for r in records}
    # filter_documents records every document it scored, relevant or not (the threshold keeps few relevant).
    assert sorted(by_name["filter_documents"].result_ids) == sorted(SCORED)
    # A chunked document's passages keep their own ids; the document is named beside them.
    chunks = by_name["chunk_documents"]
    assert "voss" in chunks.result_doc_ids and "voss" not in chunks.result_ids
    # BrowseComp-Plus' get_document records the one document it returned.
    assert by_name["get_document"].result_ids == ["voss"]


async def test_upstream_tools_record_ids_only_where_their_items_have_one(kb, tmp_path):
    uv = uvicorn.Server(uvicorn.Config(notes_upstream().streamable_http_app(), log_level="warning"))
    with serving(uv) as notes_base, upstream_on_loopback() as calc_url:
        gw = gateway_file(
            {"resource_type": "rag", "source": "mcp", "name": "calc", "url": calc_url},
            {"resource_type": "rag", "source": "mcp", "name": "notes", "url": f"{notes_base}/mcp"},
        )
        path = tmp_path / "gw.json"
        path.write_text(gw.model_dump_json())
        with gateway_served(gw, kb, tmp_path) as base:
            env = HttpMCPEnv(f"{base}/mcp", path, worker_id="w1")
            records = await _walk(env, [("echo", {"text": "hi"}), ("add", {"a": 1, "b": 2}), ("notes", {})])
    assert [(r.result_ids, r.result_doc_ids) for r in records] == [([], []), ([], []), (["n1", "7"], ["n1", "7"])]
    ledger = _ledger(tmp_path)
    assert [ledger[r.call_id] for r in records] == [[], [], ["n1", "7"]]


@pytest.mark.parametrize(("structured", "expected"), [
    ({"results": [{"id": "p1", "doc_id": "d1"}, {"id": "p2", "doc_id": "d1"}]}, (["p1", "p2"], ["d1", "d1"])),
    ({"results": [{"doc_id": "d3", "relevance": 2}]}, (["d3"], ["d3"])),
    ({"results": [{"id": None}, {"title": "x"}, {"id": ""}, {"id": True}, {"id": 1.5}, "p9", {"id": 4}]},
     (["4"], ["4"])),
    ({"result": [{"id": "n1"}]}, (["n1"], ["n1"])),
    ({"result": 42}, ([], [])),
    ({"results": "p1"}, ([], [])),
    ({"answer": "Kelmor", "doc_ids": ["d1"]}, ([], [])),
    (None, ([], [])),
])
def test_result_ids_reads_ids_only_where_an_item_has_one(structured, expected):
    assert result_ids(structured) == expected


def _item_models() -> dict[str, type[BaseModel]]:
    """Every item model a shipped tool's result lists (`results: list[Item]`), by name."""
    from rollout.gateway import knowledge
    from rollout.gateway.tools import browsecomp, pipeline

    results = [m for module in (knowledge, browsecomp, pipeline) for m in vars(module).values()
               if isinstance(m, type) and issubclass(m, BaseModel) and "results" in m.model_fields]
    return {item.__name__: item for m in results for item in get_args(m.model_fields["results"].annotation)}


SAMPLE = {str: "d7", int: 3, float: 0.5, bool: True}


def test_what_the_gateway_writes_is_what_every_reader_reads():
    items = _item_models()
    assert {"PassageHit", "DocumentHit", "RecalledPassage", "DocumentSnippet", "DocumentRef", "Candidate",
            "Relevance"} <= set(items)
    shared = {f.name for f in fields(Hit)}
    for name, model in items.items():
        values = {key: SAMPLE[info.annotation] for key, info in model.model_fields.items() if info.is_required()}
        written = model(**values).model_dump(mode="json")
        [hit] = result_hits({"results": [written]})
        assert {"id", "doc_id"} & set(written), f"{name} names no id, so its calls would record none"
        for key in shared & set(written):
            assert getattr(hit, key) == (str(written[key]) if key != "rank" else written[key]), (name, key)
    # The passages agents read evidence from carry every name a hit has.
    assert shared <= set(items["PassageHit"].model_fields) and shared <= set(items["RecalledPassage"].model_fields)
