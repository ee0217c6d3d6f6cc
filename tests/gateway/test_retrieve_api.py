"""POST /retrieve over a real gateway on loopback: Search-R1's and rLLM's requests and answers, batching, the
ledger and its training marks, the bound and the queue past it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.launch import option_error, parse_args
from rollout.gateway.retrieve_api import MAX_BODY_BYTES, RetrieveApi
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.records import Passage
from rollout.report import load_calls
from rollout.report.cli import main as report_main
from rollout.report.tool_calls.report import build_tool_report
from rollout.retrieval import BM25Retriever, DenseRetriever, HybridRetriever
from rollout.retrieval.base import Hits
from rollout.retrieval.encoder import TextEncoder
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
def served_api(kb: KnowledgeBase, run_dir: Path, *modules: dict, **options: Any) -> Iterator[tuple[str, RetrieveApi]]:
    """A gateway with `build_gateway` options (e.g. `retrieve_max_pending`) and its ledger in run_dir/tool_stats:
    its URL and its `/retrieve` routes (whose queue a test may watch)."""
    collector = StatsCollector(run_dir / "tool_stats")
    try:
        server = build_gateway(gateway_file(*(modules or [SPARSE_MODULE])), kb, collector, **options)
        assert server.retrieval is not None
        with serving(make_uvicorn(server)) as base:
            yield base, server.retrieval
    finally:
        collector.close()


@contextlib.contextmanager
def served(kb: KnowledgeBase, run_dir: Path, *modules: dict, **options: Any) -> Iterator[str]:
    with served_api(kb, run_dir, *modules, **options) as (base, _):
        yield base


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


@pytest.mark.parametrize("body", [{"queries": [QUERIES[0]], "top_k": 2}, {"queries": [QUERIES[0]], "k": 2}])
def test_the_top_k_and_k_aliases(sparse, body):
    expected = retrieve(sparse, {"queries": [QUERIES[0]], "topk": 2}).json()
    assert retrieve(sparse, body).json() == expected and len(expected["result"]) == 1


def test_one_query_string_gets_rllms_answer_as_its_search_tool_reads_it(sparse):
    """rLLM's search tool posts {"query", "top_k"} and reads results[j]["id"], ["content"] and ["score"] (its
    earlier search example read ["document"]["id"] and ["document"]["contents"]); Search-R1's `result` for the
    same query stands beside it."""
    for query in QUERIES:
        r = retrieve(sparse, {"query": query, "top_k": 2})
        assert r.status_code == 200 and r.headers["X-Top-K"] == "2"
        answer = r.json()
        assert list(answer) == ["result", "results"]
        results = answer["results"]
        hits = httpx.post(f"{sparse}/proxy/tools/{TOOL}/call", json={"query": query, "top_k": 2},
                          timeout=30).json()["structured_content"]["results"]
        assert hits, f"{query!r} should match a passage, or the comparison proves nothing"
        assert [(x["id"], x["content"], x["score"]) for x in results] == [
            (h["id"], f"{h['title']}\n{h['text']}", h["score"]) for h in hits]
        assert [list(x) for x in results] == [["id", "content", "score", "document"]] * len(hits)
        assert answer["result"] == retrieve(sparse, {"queries": [query], "topk": 2}).json()["result"]
    assert retrieve(sparse, {"query": QUERIES[0], "k": 2, "return_scores": False}).json() == retrieve(
        sparse, {"query": QUERIES[0], "top_k": 2}).json()


def test_skyrl_gyms_own_search_tool_reads_the_hits_of_one_query(sparse, tmp_path):
    """SkyRL-gym's `SearchToolGroup` posts {"query", "topk", "return_scores": true} and reads `result` as
    Search-R1's list of lists: each hit's `document.contents` reaches its tool output."""
    from skyrl_gym.tools.search import SearchToolGroup

    tool = SearchToolGroup(search_url=f"{sparse}/retrieve", topk=2, timeout=30, log_requests=False)
    for query in QUERIES:
        output = json.loads(tool.search(query))["result"]
        expected = retrieve(sparse, {"queries": [query], "topk": 2, "return_scores": True}).json()["result"][0]
        assert expected, f"{query!r} should match a passage, or the comparison proves nothing"
        assert output == "".join(f"Doc {i + 1}: {item['document']['contents'].strip()}\n"
                                 for i, item in enumerate(expected))
    assert [x["via"] for x in ledger(tmp_path)] == ["retrieve"] * 2 * len(QUERIES)  # each query counted once


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


def test_the_gateways_max_top_k_is_a_depth_it_answers(sparse):
    r = retrieve(sparse, {"queries": ["Veltrix"], "topk": 50})  # the default max_top_k: the last depth allowed
    assert r.status_code == 200 and r.headers["X-Top-K"] == "50"


class BrokenRetriever(SpyRetriever):
    """A retriever whose index fails on every search."""

    def search(self, queries: Sequence[str], k: int) -> Hits:
        raise RuntimeError("the index file is gone")


def test_a_failing_index_is_a_500_and_each_of_its_queries_is_recorded_as_a_tool_error(tmp_path):
    broken = BrokenRetriever(BM25Retriever.build(PASSAGES))
    with served(KnowledgeBase(PASSAGES, {"sparse": broken}), tmp_path) as base:
        r = retrieve(base, {"queries": QUERIES[:2]}, **{"X-Call-Id": "broken"})
        assert r.status_code == 500 and "the sparse index failed" in r.json()["error"]
        records = ledger(tmp_path)  # recorded before the answer left
    assert [(x["call_id"], x["outcome"], x["ok"], x["via"], x["result_ids"]) for x in records] == [
        (f"broken:{i}", "tool_error", False, "retrieve", []) for i in range(2)]
    assert all("the index file is gone" in x["error"] for x in records)


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
def three_retrievers(encoder: TextEncoder) -> KnowledgeBase:
    dense = DenseRetriever.from_vectors(encoder.encode_passages([p.contents for p in PASSAGES]), encoder=encoder)
    sparse = BM25Retriever.build(PASSAGES)
    return KnowledgeBase(PASSAGES, {"dense": dense, "sparse": sparse, "hybrid": HybridRetriever(dense, sparse)})


def test_a_route_per_retriever_and_retrieve_is_the_files_first_query_tool(three_retrievers, tmp_path):
    module = {"resource_type": "rag", "tool_groups": ["rag_query_hybrid", "rag_query", "rag_query_sparse"]}
    tools = {"dense": "query_knowledge_base_dense", "sparse": TOOL, "hybrid": "query_knowledge_base_hybrid"}
    with served(three_retrievers, tmp_path, module) as base:
        body = {"queries": ["Who makes looms?"], "topk": 3, "return_scores": True}
        first = retrieve(base, body).json()
        by_route = {kind: retrieve(base, body, f"/retrieve/{kind}").json() for kind in tools}
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


def test_a_2560_query_request_of_the_longest_queries_is_answered_whole_and_recorded_once_each(sparse, tmp_path):
    """Search-R1's largest request (512 prompts x 5 samples), each query as long as the gateway allows and written
    as Python's `json` and `requests` write non-ASCII text, every character of it a 6-byte escape."""
    queries = [f"Veltrix {i:04} " + "ж" * 1987 for i in range(2560)]
    raw = json.dumps({"queries": queries, "topk": 3}).encode()
    assert len(raw) > 30_000_000 and {len(q) for q in queries} == {2000}
    r = httpx.post(f"{sparse}/retrieve", content=raw, headers={"Content-Type": "application/json",
                                                               "X-Call-Id": "big"}, timeout=120)
    assert r.status_code == 200
    result = r.json()["result"]
    assert len(result) == 2560 and all(items and items[0]["id"] == "d1" for items in result)
    records = ledger(tmp_path)
    assert sorted(x["call_id"] for x in records) == sorted(f"big:{i}" for i in range(2560))


def test_64_concurrent_requests_are_all_answered(sparse, tmp_path):
    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(client.post(f"{sparse}/retrieve", json={"queries": [q], "topk": 1})
                                          for q in QUERIES * 21 + QUERIES[:1]))

    responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200] * 64
    assert len(ledger(tmp_path)) == 64


def post_in_thread(client: httpx.Client, url: str, queries: list[str], call_id: str,
                   answers: dict[str, httpx.Response | Exception]) -> threading.Thread:
    """POST `queries` to `url` on a thread of its own; its response (or the exception) lands in answers[call_id]."""
    def send() -> None:
        try:
            answers[call_id] = client.post(url, json={"queries": queries, "topk": 1}, headers={"X-Call-Id": call_id})
        except Exception as e:  # noqa: BLE001 - the test reads it
            answers[call_id] = e

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.01)


def test_past_the_bound_requests_wait_their_turn_first_come_first_served_and_are_all_answered_once(tmp_path):
    gate = threading.Event()
    spy = SpyRetriever(BM25Retriever.build(PASSAGES), gate)
    kb = KnowledgeBase(PASSAGES, {"sparse": spy})
    requests = {"first": QUERIES, "big": [*QUERIES, "Kelmor"], "small": ["Voss"], "two": QUERIES[:2]}
    answers: dict[str, httpx.Response | Exception] = {}
    with served_api(kb, tmp_path, retrieve_max_pending=4) as (base, api), \
            httpx.Client(timeout=60, limits=httpx.Limits(max_connections=8)) as client, \
            contextlib.ExitStack() as stack:
        stack.callback(gate.set)
        threads = [post_in_thread(client, f"{base}/retrieve", requests["first"], "first", answers)]
        assert spy.entered.wait(30)  # three queries in flight, held in the index
        queued = 0
        for name in ("big", "small", "two"):  # four queries, over the bound; then one that would fit but came later
            threads.append(post_in_thread(client, f"{base}/retrieve", requests[name], name, answers))
            queued += len(requests[name])
            wait_for(lambda n=queued: api.queue.queued == n, f"{queued} queries queued")
        too_many = client.post(f"{base}/retrieve", json={"queries": [*QUERIES, *QUERIES[:2]], "topk": 1})
        gate.set()
        for thread in threads:
            thread.join(60)
        assert (api.queue.in_flight, api.queue.queued) == (0, 0)
    assert too_many.status_code == 413 and "split the request" in too_many.json()["error"]
    for name, queries in requests.items():
        answer = answers[name]
        assert isinstance(answer, httpx.Response) and answer.status_code == 200, f"{name}: {answer}"
        assert len(answer.json()["result"]) == len(queries)
    assert spy.calls[:2] == [requests["first"], requests["big"]]  # the small one did not overtake the big one
    assert sorted(map(tuple, spy.calls[2:])) == sorted([tuple(requests["small"]), tuple(requests["two"])])
    assert sorted(x["call_id"] for x in ledger(tmp_path)) == sorted(
        f"{name}:{i}" for name, queries in requests.items() for i in range(len(queries)))


def test_still_waiting_after_the_max_wait_429_with_retry_after_and_no_ledger_line(tmp_path):
    gate = threading.Event()
    spy = SpyRetriever(BM25Retriever.build(PASSAGES), gate)
    answers: dict[str, httpx.Response | Exception] = {}
    with served_api(KnowledgeBase(PASSAGES, {"sparse": spy}), tmp_path, retrieve_max_pending=4,
                    retrieve_max_wait_s=0.2) as (base, api), httpx.Client(timeout=60) as client, \
            contextlib.ExitStack() as stack:
        stack.callback(gate.set)
        first = post_in_thread(client, f"{base}/retrieve", QUERIES, "first", answers)
        assert spy.entered.wait(30)
        refused = client.post(f"{base}/retrieve", json={"queries": QUERIES[:2], "topk": 1},
                              headers={"X-Call-Id": "refused"})
        assert (api.queue.in_flight, api.queue.queued) == (3, 0)
        gate.set()
        first.join(60)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    error = refused.json()["error"]
    assert "waited 0.2 s for their turn" in error and "--retrieve-max-wait-s" in error
    assert spy.calls == [QUERIES]
    assert sorted(x["call_id"] for x in ledger(tmp_path)) == ["first:0", "first:1", "first:2"]


def test_a_request_whose_client_leaves_while_it_waits_leaves_the_queue_and_frees_nothing_it_did_not_take(tmp_path):
    gate = threading.Event()
    spy = SpyRetriever(BM25Retriever.build(PASSAGES), gate)
    answers: dict[str, httpx.Response | Exception] = {}
    with served_api(KnowledgeBase(PASSAGES, {"sparse": spy}), tmp_path, retrieve_max_pending=4) as (base, api), \
            httpx.Client(timeout=60) as client, contextlib.ExitStack() as stack:
        stack.callback(gate.set)
        first = post_in_thread(client, f"{base}/retrieve", QUERIES, "first", answers)
        assert spy.entered.wait(30)
        with httpx.Client(timeout=0.3) as impatient, pytest.raises(httpx.ReadTimeout):
            impatient.post(f"{base}/retrieve", json={"queries": QUERIES[:2], "topk": 1}, headers={"X-Call-Id": "gone"})
        wait_for(lambda: api.queue.queued == 0, "the queue drop the request whose client left")
        assert api.queue.in_flight == 3
        gate.set()
        first.join(60)
        whole = client.post(f"{base}/retrieve", json={"queries": [*QUERIES, "Kelmor"], "topk": 1},
                            headers={"X-Call-Id": "whole"})  # the whole bound: only if nothing leaked
        assert (api.queue.in_flight, api.queue.queued) == (0, 0)
    assert answers["first"].status_code == 200 and whole.status_code == 200
    assert spy.calls == [QUERIES, [*QUERIES, "Kelmor"]]
    assert sorted(x["call_id"] for x in ledger(tmp_path)) == sorted(
        [f"first:{i}" for i in range(3)] + [f"whole:{i}" for i in range(4)])


def test_the_step_and_traffic_headers_land_in_the_ledger_and_a_bad_step_is_a_400(sparse, tmp_path):
    marked = retrieve(sparse, {"queries": QUERIES[:2]}, **{"X-Rollout-Step": "17", "X-Rollout-Traffic": "train",
                                                            "X-Call-Id": "marked"})
    plain = retrieve(sparse, {"query": QUERIES[0]}, **{"X-Call-Id": "plain"})
    bad = retrieve(sparse, {"queries": QUERIES}, **{"X-Rollout-Step": "seventeen"})
    assert marked.status_code == plain.status_code == 200
    assert bad.status_code == 400 and bad.json()["error"] == (
        "the X-Rollout-Step header must be an integer (the trainer's step number), got 'seventeen'")
    records = {x["call_id"]: x for x in ledger(tmp_path)}
    assert sorted(records) == ["marked:0", "marked:1", "plain:0"]
    assert [(records[f"marked:{i}"]["step"], records[f"marked:{i}"]["traffic"]) for i in range(2)] == [
        (17, "train")] * 2
    assert "step" not in records["plain:0"] and "traffic" not in records["plain:0"]


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
    args = [*demo_args(cache_dir, tmp_path), "--retrieve-max-pending", "64", "--retrieve-max-wait-s", "30"]
    with GatewayProcess(args, ready_timeout_s=300) as gw:
        base = gw.wait_ready().removesuffix("/mcp")
        r = retrieve(base, {"queries": ["born in", "founded by"], "topk": 2, "return_scores": True})
        assert r.status_code == 200 and [len(items) for items in r.json()["result"]] == [2, 2]
    tools = {row["tool_name"]: row for row in build_tool_report(tmp_path)["tools"]}
    assert tools[TOOL]["total_calls"] == 2


@pytest.mark.parametrize(("option", "says"), [
    (["--retrieve-max-pending", "0"], "--retrieve-max-pending must be at least 1, got 0"),
    (["--retrieve-max-wait-s", "-1"], "--retrieve-max-wait-s must be 0 or more seconds, got -1"),
])
def test_a_bad_bound_is_refused_naming_the_option(option, says):
    assert option_error(parse_args(["--config", "conf/gateways/rag_sparse_only.json", *option])) == says
