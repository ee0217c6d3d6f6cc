"""What a request may carry into a real gateway over loopback HTTP, and what it may read back.

A lone surrogate (`"\\ud800"` in a JSON body, which Python's JSON decoder turns into a string no UTF-8 encoder
accepts) is refused by `/retrieve` and by every tool the proxy calls, naming it, and such a call is recorded as the
failure it is; an answer that cannot be encoded is an error result, recorded as failed. get_document's docid is
bounded as a query is, and `/healthz` gets the Host/Origin checks of every other route.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import httpx
import pytest
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from rollout.data.corpus_store import CorpusStore, write_store
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.retrieval import BM25Retriever, DenseRetriever
from rollout.retrieval.encoder import TextEncoder
from tests.gateway.loopback import PASSAGES, gateway_file, gateway_served, serving

JSON = {"Content-Type": "application/json"}
BCP_MODULE = {"resource_type": "rag", "tool_groups": ["bcp_search_bm25", "bcp_get_document", "rag_query_sparse"]}
LONE = "\\ud800"
"""A lone high surrogate as a JSON body writes it (the escape, not the character)."""


def ledger(run_dir: Path) -> list[dict]:
    path = run_dir / "tool_stats" / "realtime_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def store(tmp_path: Path) -> CorpusStore:
    """The passages as a run stores its corpus: get_document looks a docid up in the store's hashes."""
    write_store(PASSAGES, tmp_path / "store")
    return CorpusStore(tmp_path / "store")


@pytest.fixture
def bcp(store: CorpusStore, tmp_path: Path) -> Iterator[str]:
    kb = KnowledgeBase(store, {"sparse": BM25Retriever.build(list(store))})
    with gateway_served(gateway_file(BCP_MODULE), kb, tmp_path / "run") as base:
        yield base


def test_retrieve_refuses_a_lone_surrogate_with_a_400_naming_it_when_the_first_tool_is_dense(
        tmp_path: Path, encoder: TextEncoder):
    dense = DenseRetriever.from_vectors(encoder.encode_passages([p.contents for p in PASSAGES]), encoder=encoder)
    kb = KnowledgeBase(PASSAGES, {"dense": dense})
    module = {"resource_type": "rag", "tool_groups": ["rag_query"]}
    with gateway_served(gateway_file(module), kb, tmp_path) as base:
        one = httpx.post(f"{base}/retrieve", content=f'{{"query": "Voss {LONE}"}}'.encode(), headers=JSON, timeout=60)
        many = httpx.post(f"{base}/retrieve", content=f'{{"queries": ["Voss", "a{LONE}b"]}}'.encode(), headers=JSON,
                          timeout=60)
        # A whole pair written as two escapes is a character like any other.
        pair = httpx.post(f"{base}/retrieve", content=b'{"query": "Voss \\ud83d\\ude00"}', headers=JSON, timeout=60)
    assert one.status_code == 400
    assert one.json()["error"] == ("query holds a lone surrogate (U+D800) at character 5: send valid Unicode text "
                                   "(a \\ud800-\\udfff escape must be one half of a surrogate pair)")
    assert many.status_code == 400 and many.json()["error"].startswith(
        "queries[1] holds a lone surrogate (U+D800) at character 1")
    assert pair.status_code == 200 and pair.json()["results"]
    assert [r["outcome"] for r in ledger(tmp_path)] == ["ok"]  # the refused requests ran no query


@pytest.mark.parametrize(("tool", "body", "argument"), [
    ("search_bm25", f'{{"query": "Voss {LONE}"}}', "query"),
    ("get_document", f'{{"docid": "{LONE}"}}', "docid"),
    ("query_knowledge_base_sparse", f'{{"query": "{LONE}", "top_k": 2}}', "query"),
])
def test_every_tool_refuses_a_lone_surrogate_as_invalid_arguments_and_records_it_so(
        bcp: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, tool: str, body: str, argument: str):
    with caplog.at_level(logging.INFO):
        r = httpx.post(f"{bcp}/proxy/tools/{tool}/call", content=body.encode(), headers=JSON, timeout=30)
    assert r.status_code == 400 and r.json()["outcome"] == "invalid_arguments"
    error = r.json()["error"]
    assert error.startswith(f"invalid arguments for {tool}:")
    assert f"\n{argument}\n" in error and "holds a lone surrogate (U+D800)" in error
    assert [(x["tool_name"], x["outcome"], x["ok"]) for x in ledger(tmp_path / "run")] == [
        (tool, "invalid_arguments", False)]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


def test_valid_text_beside_the_refusals_is_served(bcp: str, tmp_path: Path):
    r = httpx.post(f"{bcp}/proxy/tools/search_bm25/call", content=b'{"query": "Kelmor \\ud83d\\ude00"}',
                   headers=JSON, timeout=30)
    assert r.status_code == 200 and r.json()["outcome"] == "ok"
    assert [x["outcome"] for x in ledger(tmp_path / "run")] == ["ok"]


class Label(BaseModel):
    label: str


def label(name: str) -> Annotated[CallToolResult, Label]:
    """Return the label stored under a name (this one's stored text holds a lone surrogate)."""
    return CallToolResult(content=[TextContent(type="text", text=f"the label of {name}")],
                          structured_content={"label": "stored \ud800 label" if name == "broken" else "fine"})


def test_an_answer_that_cannot_be_encoded_is_an_error_result_recorded_as_failed(tmp_path: Path):
    """A tool whose answer holds a lone surrogate (in its structured content only, as a search echoes its query
    there): the answer cannot be written as UTF-8, so the call must not be recorded ok while its client gets a 500."""
    registry = ToolRegistry()
    registry.add("labels", label)
    collector = StatsCollector(tmp_path / "tool_stats")
    server = build_gateway(gateway_file({"resource_type": "rag", "tool_groups": ["labels"]}),
                           KnowledgeBase(PASSAGES), collector, registry=registry)
    try:
        with serving(make_uvicorn(server)) as base:
            r = httpx.post(f"{base}/proxy/tools/label/call", json={"name": "broken"}, timeout=30)
            fine = httpx.post(f"{base}/proxy/tools/label/call", json={"name": "other"}, timeout=30)
    finally:
        collector.close()
    assert r.status_code == 200 and r.json()["is_error"] is True and r.json()["outcome"] == "tool_error"
    assert r.json()["text"] == ("Error executing tool label: its answer holds a lone surrogate (U+D800) at "
                                "structuredContent.label, which cannot be sent as UTF-8; the data it read (e.g. the "
                                "corpus) holds invalid Unicode: fix that text")
    assert fine.status_code == 200 and fine.json()["structured_content"] == {"label": "fine"}
    assert [(x["outcome"], x["ok"]) for x in ledger(tmp_path)] == [("tool_error", False), ("ok", True)]


def test_get_document_bounds_the_docid_as_a_query_is_bounded(bcp: str, tmp_path: Path):
    docid = "x" * 900_000
    r = httpx.post(f"{bcp}/proxy/tools/get_document/call", json={"docid": docid}, timeout=30)
    assert r.status_code == 200 and r.json()["is_error"] is True
    assert r.json()["text"] == ("Error executing tool get_document: docid is 900000 characters; the limit is 2000: "
                                "pass a docid that a search returned")
    assert len(r.content) < 2_000  # the docid is not echoed back
    known = httpx.post(f"{bcp}/proxy/tools/get_document/call", json={"docid": "d1"}, timeout=30)
    assert known.json()["outcome"] == "ok" and "Veltrix Holdings" in known.json()["text"]


@pytest.mark.parametrize(("headers", "status", "says"), [
    ({"Host": "evil.example"}, 421, "Invalid Host header 'evil.example'"),
    ({"Origin": "http://evil.example"}, 403, "Invalid Origin header 'http://evil.example'"),
])
def test_healthz_refuses_a_foreign_host_or_origin_as_every_route_does(bcp: str, headers, status, says):
    refused = httpx.get(f"{bcp}/healthz", headers=headers, timeout=30)
    mcp = httpx.post(f"{bcp}/mcp", json={}, headers={"Accept": "application/json, text/event-stream", **headers},
                     timeout=30)
    assert refused.status_code == status == mcp.status_code
    assert list(refused.json()) == ["error"] and refused.json()["error"].startswith(says)
    assert "search_bm25" not in refused.text
    local = httpx.get(f"{bcp}/healthz", headers={"Origin": bcp}, timeout=30)
    assert local.status_code == 200 and local.json()["tools"] == ["search_bm25", "get_document",
                                                                  "query_knowledge_base_sparse"]
