"""POST /retrieve over a real gateway on loopback: Search-R1's request and answer, batching, the ledger, the bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout.gateway.__main__ import option_error, parse_args
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.retrieve_api import MAX_BODY_BYTES
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.records import Passage
from rollout.report import load_calls
from rollout.report.cli import main as report_main
from rollout.report.tool_stats import build_tool_report
from rollout.retrieval import BM25Retriever, DenseRetriever, Encoder, HybridRetriever
from rollout.retrieval.base import Hits
from rollout.run.gateway_process import GatewayProcess
from rollout.run_folder import TRAJECTORY_FILE
from tests.gateway.loopback import PASSAGES, SPARSE_MODULE, gateway_file, gateway_served, serving, sparse_kb
from tests.gateway.test_process import demo_args

TOOL = "query_knowledge_base_sparse"
QUERIES = ["Veltrix ORG-5521", "Arlen Voss born", "Dravia city"]


class SpyRetriever:
    """A real retriever that counts its `search` calls (and, given `gate`, holds each until the gate opens)."""

    def __init__(self, inner: Any, gate: threading.Event | None = None):
        self.inner = inner
        self.name = inner.name
        self.calls: list[list[str]] = []
        self.gate = gate
        self.entered = threading.Event()

    def search(self, queries: Sequence[str], k: int) -> Hits:
        self.calls.append(list(queries))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        return self.inner.search(queries, k)

    def __getattr__(self, name: str) -> Any:  # `params` and the like, read by the knowledge base
        return getattr(self.inner, name)


@contextlib.contextmanager
def served(kb: KnowledgeBase, run_dir: Path, *modules: dict, **options: Any) -> Iterator[str]:
    """A gateway with `build_gateway` options (e.g. `retrieve_max_pending`) and its ledger in run_dir/tool_stats."""
    collector = StatsCollector(run_dir / "tool_stats")
    try:
        with serving(make_uvicorn(build_gateway(gateway_file(*(modules or [SPARSE_MODULE])), kb, collector,
                                                **options))) as base:
            yield base
    finally:
        collector.close()


def retrieve(base: str, body: Any, path: str = "/retrieve", **headers: str) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=60)


def ledger(run_dir: Path) -> list[dict]:
    path = run_dir / "tool_stats" / "realtime_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def sparse(tmp_path):
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), tmp_path) as base:
        yield base


def test_search_r1_answer_with_scores_is_the_mcp_tools_answer_per_query(sparse, tmp_path):
    r = retrieve(sparse, {"queries": QUERIES, "topk": 2, "return_scores": True})
    assert r.status_code == 200 and r.headers["X-Top-K"] == "2"
    result = r.json()["result"]
    assert len(result) == len(QUERIES)
    for query, items in zip(QUERIES, result, strict=True):
        tool = httpx.post(f"{sparse}/proxy/tools/{TOOL}/call", json={"query": query, "top_k": 2}, timeout=30).json()
        hits = tool["structured_content"]["results"]
        assert [(i["document"]["id"], i["score"]) for i in items] == [(h["id"], h["score"]) for h in hits]
        assert hits, f"{query!r} should match a passage, or the comparison proves nothing"
        for item, hit in zip(items, hits, strict=True):
            assert item["document"] == {"id": hit["id"], "contents": f"{hit['title']}\n{hit['text']}",
                                        "title": hit["title"], "text": hit["text"]}
    assert result[0][0]["document"]["contents"] == "Veltrix Holdings\n" + PASSAGES[1].text


def test_without_return_scores_each_item_is_the_bare_document(sparse):
    with_scores = retrieve(sparse, {"queries": QUERIES, "topk": 2, "return_scores": True}).json()["result"]
    bare = retrieve(sparse, {"queries": QUERIES, "topk": 2}).json()["result"]
    assert bare == [[item["document"] for item in items] for items in with_scores]


@pytest.mark.parametrize("body", [{"query": QUERIES[0], "topk": 2}, {"queries": [QUERIES[0]], "top_k": 2},
                                  {"queries": [QUERIES[0]], "k": 2}])
def test_one_query_string_and_the_top_k_and_k_aliases(sparse, body):
    expected = retrieve(sparse, {"queries": [QUERIES[0]], "topk": 2}).json()
    assert retrieve(sparse, body).json() == expected and len(expected["result"]) == 1


def eight_passages() -> list[Passage]:
    """Three passages match "Veltrix" (BM25 gives no weight to a word half the passages or more hold)."""
    return [Passage(f"p{i}", "Note", f"Veltrix loom report {i}." if i < 3 else f"Kelmor city note {i}.")
            for i in range(8)]


def test_without_topk_the_gateways_default_top_k_answers(tmp_path):
    passages = eight_passages()
    kb = KnowledgeBase(passages, {"sparse": BM25Retriever.build(passages)}, default_top_k=3)
    with served(kb, tmp_path) as base:
        for body in ({"queries": ["Veltrix"]}, {"queries": ["Veltrix"], "topk": None}):
            r = retrieve(base, body)
            assert r.headers["X-Top-K"] == "3" and len(r.json()["result"][0]) == 3


def test_a_pinned_top_k_wins_over_the_requests_topk(tmp_path):
    passages = eight_passages()
    kb = KnowledgeBase(passages, {"sparse": BM25Retriever.build(passages)})
    pinned = {**SPARSE_MODULE, "tool_groups": [{"name": "rag_query_sparse", "fixed_params": {"top_k": 2}}]}
    with served(kb, tmp_path, pinned) as base:
        r = retrieve(base, {"queries": ["Veltrix"], "topk": 3})
    assert r.headers["X-Top-K"] == "2" and len(r.json()["result"][0]) == 2


def test_each_query_is_one_ledger_record_marked_via_retrieve_and_the_report_counts_them(sparse, tmp_path, capsys):
    r = retrieve(sparse, {"queries": QUERIES, "topk": 2}, **{"X-Task-Id": "step-3", "X-Call-Id": "batch-1"})
    answered = [[d["id"] for d in items] for items in r.json()["result"]]
    records = ledger(tmp_path)
    assert [(x["call_id"], x["tool_name"], x["task_id"], x["via"], x["outcome"]) for x in records] == [
        (f"batch-1:{i}", TOOL, "step-3", "retrieve", "ok") for i in range(len(QUERIES))]
    assert [x["result_ids"] for x in records] == answered
    assert all(x["duration_ms"] > 0 for x in records)
    assert report_main(["tool-stats", str(tmp_path)]) == 0
    tools = {row["tool_name"]: row for row in build_tool_report(tmp_path)["tools"]}
    assert tools[TOOL]["total_calls"] == len(QUERIES)


def test_a_runs_report_counts_retrieve_records_and_discards_none(sparse, tmp_path):
    """In a run folder (with a trajectory), a /retrieve record has no trajectory call and is still no discarded
    attempt; the MCP call the trajectory made joins as before."""
    httpx.post(f"{sparse}/proxy/tools/{TOOL}/call", json={"query": QUERIES[0]}, headers={"X-Call-Id": "mcp-1"},
               timeout=30)
    retrieve(sparse, {"queries": QUERIES[:2]})
    task = {"id": "q1", "tool_calls": [{"call_id": "mcp-1", "name": TOOL, "ok": True, "latency_ms": 5.0}]}
    (tmp_path / TRAJECTORY_FILE).write_text(json.dumps(task) + "\n")
    calls = load_calls(tmp_path)
    assert sorted(calls["call_id"].str.split(":").str[0].map(lambda c: "mcp" if c == "mcp-1" else "retrieve")) == [
        "mcp", "retrieve", "retrieve"]
    assert calls.loc[calls["call_id"] == "mcp-1", "rtt_ms"].tolist() == [5.0]
    assert build_tool_report(tmp_path)["summary"]["discarded_calls"] == 0


def test_n_queries_are_one_search_call_on_the_index(tmp_path):
    spy = SpyRetriever(BM25Retriever.build(PASSAGES))
    with served(KnowledgeBase(PASSAGES, {"sparse": spy}), tmp_path) as base:
        r = retrieve(base, {"queries": QUERIES * 4, "topk": 1})
    assert r.status_code == 200 and len(r.json()["result"]) == 12
    assert spy.calls == [[q.strip() for q in QUERIES * 4]]


@pytest.fixture(scope="module")
def three_retrievers(encoder: Encoder) -> KnowledgeBase:
    dense = DenseRetriever.from_vectors(encoder.encode_passages([p.contents for p in PASSAGES]), encoder=encoder)
    sparse = BM25Retriever.build(PASSAGES)
    return KnowledgeBase(PASSAGES, {"dense": dense, "sparse": sparse, "hybrid": HybridRetriever(dense, sparse)})


def test_a_route_per_retriever_and_retrieve_is_the_files_first_query_tool(three_retrievers, tmp_path):
    module = {"resource_type": "rag", "tool_groups": ["rag_query_hybrid", "rag_query", "rag_query_sparse"]}
    tools = {"dense": "query_knowledge_base_dense", "sparse": TOOL, "hybrid": "query_knowledge_base_hybrid"}
    with served(three_retrievers, tmp_path, module) as base:
        first = retrieve(base, {"query": "Who makes looms?", "topk": 3, "return_scores": True}).json()
        by_route = {kind: retrieve(base, {"query": "Who makes looms?", "topk": 3, "return_scores": True},
                                   f"/retrieve/{kind}").json() for kind in tools}
        for kind, tool in tools.items():
            mcp = httpx.post(f"{base}/proxy/tools/{tool}/call", json={"query": "Who makes looms?", "top_k": 3},
                             timeout=30).json()["structured_content"]["results"]
            got = by_route[kind]["result"][0]
            assert [i["document"]["id"] for i in got] == [h["id"] for h in mcp]
            assert [i["score"] for i in got] == pytest.approx([h["score"] for h in mcp], abs=1e-6)
    assert first == by_route["hybrid"] and by_route["hybrid"] != by_route["dense"]
    assert [x["tool_name"] for x in ledger(tmp_path) if x.get("via")] == [
        "query_knowledge_base_hybrid", "query_knowledge_base_dense", TOOL, "query_knowledge_base_hybrid"]


def test_404_names_the_fix_for_an_unserved_retriever_and_for_a_gateway_without_a_query_tool(sparse, tmp_path):
    r = retrieve(sparse, {"query": "Voss"}, "/retrieve/dense")
    assert r.status_code == 404 and r.json()["error"].endswith("it serves /retrieve/sparse")
    system = {"resource_type": "system_info", "tool_groups": ["system_info"]}
    with served(sparse_kb(), tmp_path, system) as base:
        r = retrieve(base, {"query": "Voss"})
    assert r.status_code == 404 and "add rag_query_sparse" in r.json()["error"]


def test_a_512_query_request_of_long_queries_is_answered_whole_and_recorded_once_each(sparse, tmp_path):
    queries = [f"{i} " + ("Veltrix looms " * 200)[:1990] for i in range(512)]
    r = retrieve(sparse, {"queries": queries, "topk": 3})
    assert r.status_code == 200
    result = r.json()["result"]
    assert len(result) == 512 and all(items and items[0]["id"] == "d1" for items in result)
    assert len([x for x in ledger(tmp_path) if x.get("via") == "retrieve"]) == 512


def test_64_concurrent_requests_are_all_answered(sparse, tmp_path):
    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(client.post(f"{sparse}/retrieve", json={"queries": [q], "topk": 1})
                                          for q in QUERIES * 21 + QUERIES[:1]))

    responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200] * 64
    assert len(ledger(tmp_path)) == 64


def test_past_the_bound_429_with_retry_after_and_every_accepted_query_answered_once(tmp_path):
    gate = threading.Event()
    spy = SpyRetriever(BM25Retriever.build(PASSAGES), gate)
    with served(KnowledgeBase(PASSAGES, {"sparse": spy}), tmp_path, retrieve_max_pending=4) as base:
        with httpx.Client(timeout=60) as client, contextlib.ExitStack() as stack:
            stack.callback(gate.set)
            held: list[httpx.Response] = []
            first = threading.Thread(target=lambda: held.append(
                client.post(f"{base}/retrieve", json={"queries": QUERIES, "topk": 1})))
            first.start()
            assert spy.entered.wait(60)  # three queries in flight, held in the index
            refused = client.post(f"{base}/retrieve", json={"queries": QUERIES[:2], "topk": 1})
            too_many = client.post(f"{base}/retrieve", json={"queries": QUERIES + QUERIES[:2], "topk": 1})
            gate.set()
            first.join(60)
            retried = client.post(f"{base}/retrieve", json={"queries": QUERIES[:2], "topk": 1})
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert "--retrieve-max-pending" in refused.json()["error"]
    assert too_many.status_code == 413 and "split the request" in too_many.json()["error"]
    assert held[0].status_code == 200 and len(held[0].json()["result"]) == 3
    assert retried.status_code == 200
    assert spy.calls == [QUERIES, QUERIES[:2]]
    assert len(ledger(tmp_path)) == 5


@pytest.mark.parametrize(("body", "says"), [
    ({"queries": ["a"], "topk": 3, "top_n": 2}, "unknown key 'top_n'"),
    ({"queries": ["a"], "topk": 0}, "topk must be an integer from 1 to 50"),
    ({"queries": ["a"], "topk": "3"}, "topk must be an integer from 1 to 50"),
    ({"queries": ["a"], "top_k": 51}, "top_k must be an integer from 1 to 50 (the gateway's max_top_k)"),
    ({"queries": ["a"], "k": True}, "k must be an integer"),
    ({"queries": ["a"], "topk": 3, "k": 3}, "send one of topk, k"),
    ({"queries": []}, "queries is empty: send at least one query"),
    ({"queries": ["a"], "query": "a"}, "send queries (a list) or query (one string), not both"),
    ({"queries": "a"}, "queries must be a list of strings"),
    ({"query": ["a"]}, "query must be one string"),
    ({"queries": ["a", "  "]}, "queries[1]: query is empty"),
    ({"queries": ["a"], "return_scores": "yes"}, "return_scores must be true or false"),
    ({"topk": 3}, "no queries: send"),
    ([["a"]], "the body must be a JSON object"),
])
def test_400_names_the_fix_and_no_query_runs(sparse, tmp_path, body, says):
    r = retrieve(sparse, body)
    assert r.status_code == 400 and says in r.json()["error"]
    assert ledger(tmp_path) == []


def test_401_without_the_token(tmp_path):
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), tmp_path, auth_token="s3cret") as base:
        refused = retrieve(base, {"query": "Voss"})
        allowed = retrieve(base, {"query": "Voss"}, Authorization="Bearer s3cret")
    assert refused.status_code == 401 and allowed.status_code == 200


def test_421_for_a_foreign_host_and_413_for_a_body_over_the_limit(sparse, tmp_path):
    foreign = retrieve(sparse, {"query": "Voss"}, Host="evil.example")
    assert foreign.status_code == 421 and "loopback name" in foreign.json()["error"]
    big = httpx.post(f"{sparse}/retrieve", content=b'{"queries": ["' + b"a" * MAX_BODY_BYTES + b'"]}',
                     headers={"Content-Type": "application/json"}, timeout=60)
    assert big.status_code == 413 and "split the queries" in big.json()["error"]
    assert ledger(tmp_path) == []


def test_the_standalone_gateway_serves_retrieve(cache_dir, tmp_path):
    """`rollout gateway --config FILE` (the demo KB, sparse only) answers /retrieve and its report counts it."""
    args = [*demo_args(cache_dir, tmp_path), "--retrieve-max-pending", "64"]
    with GatewayProcess(args, ready_timeout_s=300) as gw:
        base = gw.wait_ready().removesuffix("/mcp")
        r = retrieve(base, {"queries": ["born in", "founded by"], "topk": 2, "return_scores": True})
        assert r.status_code == 200 and [len(items) for items in r.json()["result"]] == [2, 2]
    tools = {row["tool_name"]: row for row in build_tool_report(tmp_path)["tools"]}
    assert tools[TOOL]["total_calls"] == 2


def test_a_bound_under_one_query_is_refused_naming_the_option():
    args = parse_args(["--config", "conf/gateways/rag_sparse_only.json", "--retrieve-max-pending", "0"])
    assert option_error(args) == "--retrieve-max-pending must be at least 1, got 0"
