"""search_documents and recall_documents over a real MCP client, on a corpus built here."""

import pytest
from mcp.client.client import Client

from rollout.agents.heuristic import find_retrieval_tools
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.mcp_client.schema import mcp_tool_to_function
from rollout.records import Passage
from rollout.report import load_calls
from rollout.retrieval import BM25Retriever
from rollout.wire import META_CALL_ID

SEARCH_RECALL = GATEWAYS_DIR / "rag_search_recall.json"
FILLER = " ".join(f"filler{i}" for i in range(430))
PASSAGES = [
    # Document "voss" is chunked into three passages; its second passage is long.
    Passage("voss-0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961.", doc_id="voss"),
    Passage("voss-1", "Arlen Voss", f"{FILLER} Voss founded the Kelmor glassworks.", doc_id="voss"),
    Passage("voss-2", "Arlen Voss", "Voss married a painter from Dravia.", doc_id="voss"),
    Passage("veltrix", "Veltrix Holdings", "Veltrix Holdings makes textile looms. Founded by Arlen Voss."),
    Passage("kelmor", "Kelmor", "Kelmor is a port city in Dravia with a glassworks."),
    Passage("dravia", "Dravia", "Dravia is a country on the northern sea."),
    Passage("misc", "Orchards", "Apple orchards line the valley roads."),
]


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})


async def _call(kb, name, arguments, collector=None):
    async with Client(build_gateway(load_gateway_file(SEARCH_RECALL), kb, collector)) as client:
        return await client.call_tool(name, arguments, meta={META_CALL_ID: "c0"})


def test_shipped_file_serves_both_tools_on_the_sparse_index():
    plan = plan_gateway(load_gateway_file(SEARCH_RECALL))
    assert [t.fn.__name__ for t in plan.tools] == ["search_documents", "recall_documents"]
    assert plan.requires == ["sparse"]


def test_doc_rows_group_passages_by_source_document(kb):
    rows = kb.doc_rows()
    assert rows["voss"] == (0, 1, 2) and rows["veltrix"] == (3,)
    assert kb.doc_rows() is rows


async def test_search_ranks_each_document_once_by_its_best_passage(kb):
    query = "Voss glassworks painter"  # "voss" is in 4 of 7 passages (idf 0); the other two words count
    result = await _call(kb, "search_documents", {"query": query})
    assert not result.is_error
    hits = result.structured_content["results"]
    assert [h["doc_id"] for h in hits] == ["voss", "kelmor"]  # the other documents match no word that counts
    assert [h["rank"] for h in hits] == [1, 2]
    assert all("text" not in h for h in hits)
    passage_scores = kb.retrievers["sparse"].search([query], len(PASSAGES))
    best_voss = max(s for r, s in zip(passage_scores.indices[0], passage_scores.scores[0], strict=True) if 0 <= r < 3)
    assert hits[0]["score"] == pytest.approx(float(best_voss))
    assert hits[0]["num_passages"] == 3 and hits[0]["title"] == "Arlen Voss"


async def test_search_lists_no_document_for_a_query_bm25_cannot_match(kb):
    result = await _call(kb, "search_documents", {"query": "the of xylophone"})
    assert not result.is_error and result.structured_content["results"] == []


async def test_search_respects_max_files_and_rejects_out_of_range(kb):
    one = await _call(kb, "search_documents", {"query": "Voss Kelmor Dravia", "max_files": 1})
    assert len(one.structured_content["results"]) == 1
    for bad in (0, 51):
        result = await _call(kb, "search_documents", {"query": "Voss", "max_files": bad})
        assert result.is_error and "max_files must be between 1 and 50" in result.content[0].text


async def test_recall_stays_within_the_token_budget_best_chunk_first(kb):
    result = await _call(kb, "recall_documents", {"query": "glassworks founded", "max_tokens": 300, "doc_ids": ["voss"]})
    assert not result.is_error
    content = result.structured_content
    chunks = content["results"]
    assert content["total_tokens"] == sum(c["tokens"] for c in chunks) <= 300
    # The budget is in the gateway tokenizer's tokens (WordPiece splits "filler12" in several), not in words.
    counter = kb.token_counter()
    assert all(c["tokens"] == counter.count(c["text"]) for c in chunks)
    assert sum(c["tokens"] for c in chunks) > sum(len(c["text"].split()) for c in chunks)
    # The long passage is recalled in chunks of at most 200 words; the one naming the glassworks ranks first.
    assert chunks[0]["id"] == "voss-1" and chunks[0]["chunk"] == 2 and "glassworks" in chunks[0]["text"]
    assert max(len(c["text"].split()) for c in chunks) <= 200
    assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert chunks[-1]["truncated"] and not any(c["truncated"] for c in chunks[:-1])
    assert "[1] Arlen Voss (doc voss, passage voss-1, chunk 2" in result.content[0].text


async def test_recall_reads_only_the_given_documents(kb):
    result = await _call(kb, "recall_documents", {"query": "Kelmor", "doc_ids": ["kelmor", "dravia"]})
    content = result.structured_content
    assert content["doc_ids"] == ["kelmor", "dravia"]
    assert {c["doc_id"] for c in content["results"]} == {"kelmor", "dravia"}
    assert content["results"][0]["doc_id"] == "kelmor"


async def test_recall_without_doc_ids_reads_what_search_finds(kb, tmp_path):
    collector = StatsCollector(tmp_path / "tool_stats")
    result = await _call(kb, "recall_documents", {"query": "Veltrix looms"}, collector)
    collector.close()
    assert result.structured_content["doc_ids"] == ["veltrix"]
    assert [c["id"] for c in result.structured_content["results"]] == ["veltrix"]
    assert load_calls(tmp_path).loc[0, "result_ids"] == ["veltrix"]  # stats see the recalled passage ids


async def test_recall_names_unknown_document_ids(kb):
    result = await _call(kb, "recall_documents", {"query": "Voss", "doc_ids": ["voss", "nope", "gone"]})
    assert result.is_error
    assert "unknown document ids: nope, gone" in result.content[0].text


async def test_recall_rejects_a_budget_out_of_range(kb):
    result = await _call(kb, "recall_documents", {"query": "Voss", "max_tokens": 0})
    assert result.is_error and "max_tokens must be between 1 and" in result.content[0].text


async def test_heuristic_agent_searches_with_recall_not_with_the_document_list(kb):
    async with Client(build_gateway(load_gateway_file(SEARCH_RECALL), kb)) as client:
        specs = [mcp_tool_to_function(t) for t in (await client.list_tools()).tools]
    assert [t.name for t in find_retrieval_tools(specs)] == ["recall_documents"]
