"""The flat-parameter HTTP proxy over a real gateway on loopback: status codes and stats."""

import contextlib

import httpx
import pytest

from rollout.gateway.proxy import MAX_BODY_BYTES
from rollout.llm.token_count import load_token_counter
from rollout.report import load_calls
from tests.gateway.loopback import SPARSE_MODULE, gateway_file, gateway_served, sparse_kb, upstream_on_loopback


def proxy(base: str, tool: str, body=None, *, content: bytes | None = None, **headers: str) -> httpx.Response:
    url = f"{base}/proxy/tools/{tool}/call"
    if content is not None:
        return httpx.post(url, content=content, headers={"Content-Type": "application/json", **headers}, timeout=30)
    return httpx.post(url, json=body, headers=headers, timeout=30)


@pytest.fixture
def served(tmp_path):
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), tmp_path) as base:
        yield base


def test_200_with_structured_content_text_and_ids_in_stats(served, tmp_path):
    r = proxy(served, "query_knowledge_base_sparse", {"query": "ORG-5521", "top_k": 2},
              **{"X-Task-Id": "task-7", "X-Call-Id": "call-1", "X-Worker-Id": "curl"})
    assert r.status_code == 200
    body = r.json()
    assert body["outcome"] == "ok" and body["is_error"] is False and body["call_id"] == "call-1"
    assert body["structured_content"]["results"][0]["id"] == "d1"
    assert "Veltrix Holdings" in body["text"]
    assert body["accounting"]["stage"] == "retrieval"
    assert body["accounting"]["context_tokens"] == load_token_counter(None).count(body["text"])
    assert r.headers["X-Call-Id"] == "call-1"
    stats = load_calls(tmp_path)
    assert stats[["call_id", "task_id", "worker_id", "outcome"]].values.tolist() == [["call-1", "task-7", "curl", "ok"]]
    assert stats.loc[0, "result_ids"][0] == "d1"


def test_400_for_arguments_that_fail_the_schema_with_the_reason(served, tmp_path):
    r = proxy(served, "query_knowledge_base_sparse", {"query": "Voss", "top_k": "many"})
    missing = proxy(served, "query_knowledge_base_sparse", {"top_k": 2})
    assert r.status_code == 400 and missing.status_code == 400
    assert r.json()["outcome"] == "invalid_arguments"
    assert r.json()["error"].startswith("invalid arguments for query_knowledge_base_sparse:")
    assert "top_k" in r.json()["error"] and "errors.pydantic.dev" not in r.json()["error"]
    assert "query" in missing.json()["error"] and "Field required" in missing.json()["error"]
    assert load_calls(tmp_path)["outcome"].tolist() == ["invalid_arguments", "invalid_arguments"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"[1, 2]", "the body is a JSON array, not an object"), (b"{query:", "the body is not JSON")],
)
def test_400_for_a_body_that_is_not_a_json_object_and_no_call_is_made(served, tmp_path, content, reason):
    r = proxy(served, "query_knowledge_base_sparse", content=content)
    assert r.status_code == 400 and r.json()["error"].startswith(reason)
    assert 'e.g. {"query"' in r.json()["error"]
    assert load_calls(tmp_path).empty


@pytest.mark.parametrize("tool", ["no_such_tool", "query_knowledge_base_dense"])  # unknown, and registered but not exposed
def test_404_for_an_unknown_or_unexposed_tool_lists_the_exposed_ones(served, tmp_path, tool):
    r = proxy(served, tool, {"query": "Voss"})
    assert r.status_code == 404
    assert r.json()["error"] == f"unknown tool {tool!r}: this gateway exposes query_knowledge_base_sparse"
    assert load_calls(tmp_path)["outcome"].tolist() == ["unknown_tool"]


def test_a_tool_error_is_200_with_is_error(served, tmp_path):
    r = proxy(served, "query_knowledge_base_sparse", {"query": "Voss", "top_k": 999})
    assert r.status_code == 200
    assert r.json()["is_error"] is True and r.json()["outcome"] == "tool_error"
    assert "top_k must be between 1 and 50" in r.json()["text"]
    assert load_calls(tmp_path)["outcome"].tolist() == ["tool_error"]


def test_empty_body_means_no_arguments(tmp_path):
    gw = gateway_file({"resource_type": "system", "tool_groups": ["system_info"]})
    with gateway_served(gw, sparse_kb(), tmp_path) as base:
        r = proxy(base, "get_corpus_info", content=b"")
    assert r.status_code == 200 and r.json()["structured_content"]["num_passages"] == 3


def test_upstream_tools_502_when_the_upstream_is_down_and_504_over_the_timeout(tmp_path):
    with contextlib.ExitStack() as upstream:
        url = upstream.enter_context(upstream_on_loopback())
        gw = gateway_file({"resource_type": "rag", "source": "mcp", "name": "calc", "url": url})
        with gateway_served(gw, sparse_kb(), tmp_path, tool_timeout_s=0.5) as base:
            ok = proxy(base, "add", {"a": 1, "b": 2})
            slow = proxy(base, "slow", {"seconds": 5})
            upstream.close()
            down = proxy(base, "add", {"a": 1, "b": 2}, **{"X-Call-Id": "after-stop"})
    assert ok.status_code == 200 and ok.json()["structured_content"] == {"result": 3}
    assert slow.status_code == 504 and slow.json()["outcome"] == "timeout"
    assert "timed out after 0.5 s" in slow.json()["error"]
    assert down.status_code == 502 and down.json()["outcome"] == "upstream_unavailable"
    assert f"upstream MCP server {url} (tool set 'calc') is unavailable" in down.json()["error"]
    stats = load_calls(tmp_path)
    assert stats["outcome"].tolist() == ["ok", "timeout", "upstream_unavailable"]
    assert stats["call_id"].tolist()[-1] == "after-stop"


QUERY = b'{"query": "Voss"}'


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_415_for_a_body_without_a_json_content_type_and_no_call_is_made(served, tmp_path, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    r = httpx.post(f"{served}/proxy/tools/query_knowledge_base_sparse/call", content=QUERY, headers=headers, timeout=30)
    assert r.status_code == 415
    assert "Content-Type: application/json" in r.json()["error"] and "\n" not in r.json()["error"]
    assert load_calls(tmp_path).empty


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [({"Host": "evil.example:80"}, 421, "Invalid Host header"),
     ({"Origin": "http://evil.example"}, 403, "Invalid Origin header")],
)
def test_a_foreign_host_or_origin_is_refused_like_on_mcp(served, tmp_path, headers, status, reason):
    url = f"{served}/proxy/tools/query_knowledge_base_sparse/call"
    r = httpx.post(url, json={"query": "Voss"}, headers=headers, timeout=30)
    mcp = httpx.post(f"{served}/mcp", json={}, headers={"Accept": "application/json, text/event-stream", **headers},
                     timeout=30)
    assert r.status_code == status == mcp.status_code
    assert r.json()["error"].startswith(reason) and r.json()["outcome"] == "forbidden"
    assert load_calls(tmp_path).empty


def test_a_local_origin_is_served(served):
    r = proxy(served, "query_knowledge_base_sparse", {"query": "Voss"}, Origin=served)
    assert r.status_code == 200


def test_413_for_a_body_over_the_limit_by_its_length_or_by_its_bytes(served, tmp_path):
    url = f"{served}/proxy/tools/query_knowledge_base_sparse/call"
    padding = b" " * MAX_BODY_BYTES
    declared = httpx.post(url, content=QUERY + padding, headers={"Content-Type": "application/json"}, timeout=30)

    def chunks():  # no Content-Length: the limit must hold on the bytes read
        yield QUERY
        yield padding

    streamed = httpx.post(url, content=chunks(), headers={"Content-Type": "application/json"}, timeout=30)
    assert "content-length" not in streamed.request.headers
    assert declared.status_code == 413 and streamed.status_code == 413
    assert str(MAX_BODY_BYTES) in streamed.json()["error"]
    assert load_calls(tmp_path).empty


def test_the_catalog_lists_each_tool_with_its_spec_and_a_call_url_that_works(tmp_path):
    """`GET /proxy/tools` (seed 003): a client without MCP finds each tool, its server and how to call it;
    the server-named path calls the same tool, and names the right server when given the wrong one."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(upstream_on_loopback())
        gw = gateway_file(SPARSE_MODULE, {"resource_type": "rag", "source": "mcp", "name": "calc", "url": url})
        base = stack.enter_context(gateway_served(gw, sparse_kb(), tmp_path))
        listed = httpx.get(f"{base}/proxy/tools", timeout=30)
        tools = {t["name"]: t for t in listed.json()["tools"]}
        search, add = tools["query_knowledge_base_sparse"], tools["add"]
        by_url = httpx.post(search["call_url"], json={"query": "ORG-5521", "top_k": 1}, timeout=30)
        upstream_call = httpx.post(add["call_url"], json={"a": 2, "b": 3}, timeout=30)
        wrong = httpx.post(f"{base}/proxy/calc/tools/query_knowledge_base_sparse/call", json={"query": "x"}, timeout=30)
    assert listed.status_code == 200
    assert search["function"]["type"] == "function" and search["function"]["function"]["name"] == search["name"]
    assert "query" in search["function"]["function"]["parameters"]["properties"]
    assert search["call_url"] == f"{base}/proxy/{search['server']}/tools/query_knowledge_base_sparse/call"
    assert add["server"] == "calc" and add["fixed_params"] == {} and search["fixed_params"] == {}
    assert by_url.status_code == 200 and by_url.json()["structured_content"]["results"][0]["id"] == "d1"
    assert upstream_call.status_code == 200 and upstream_call.json()["structured_content"] == {"result": 5}
    assert wrong.status_code == 404 and f"/proxy/{search['server']}/tools/" in wrong.json()["error"]
    assert load_calls(tmp_path)["outcome"].tolist() == ["ok", "ok"]  # the refused call is not a call
