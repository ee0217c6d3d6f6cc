"""One vocabulary: a call's outcome is the same word in the trajectory and in the gateway's ledger."""

from __future__ import annotations

import contextlib

from envs import HttpMCPRagEnv
from rollout.jsonl import read_jsonl
from rollout.listen import bind_socket
from rollout.run_folder import calls_path
from rollout.wire import OUTCOMES
from tests.gateway.loopback import SPARSE_MODULE, gateway_file, gateway_served, sparse_kb, upstream_on_loopback

SPARSE = "query_knowledge_base_sparse"


async def test_client_and_gateway_record_the_same_outcome_for_every_call(tmp_path):
    sock = bind_socket("127.0.0.1", 0)
    with contextlib.ExitStack() as upstream:
        url = upstream.enter_context(upstream_on_loopback(sock))
        calc = {"resource_type": "rag", "source": "mcp", "name": "calc", "url": url}
        gw = gateway_file(SPARSE_MODULE, calc)
        path = tmp_path / "gw.json"
        path.write_text(gw.model_dump_json())
        kb = sparse_kb()
        kb.search("sparse", "warm", 1)  # the BM25 kernel's first call compiles it: not within the tool limit
        with gateway_served(gw, kb, tmp_path, tool_timeout_s=1.0) as base:
            async with HttpMCPRagEnv(f"{base}/mcp", path, worker_id="w1", run_id="r1") as env:
                task = env.for_task("t1", attempt=2)
                await task.call_tool(SPARSE, {"query": "ORG-5521"})  # ok
                await task.call_tool(SPARSE, {"query": "ORG-5521", "top_k": "many"})  # invalid_arguments
                await task.call_tool(SPARSE, {"query": "x" * 5000})  # tool_error: over the query limit
                await task.call_tool("slow", {"seconds": 3})  # timeout: over the gateway's tool limit
                upstream.close()
                await task.call_tool("echo", {"text": "gone"})  # upstream_unavailable
    client = {c.call_id: c.outcome for c in task.calls}
    ledger = read_jsonl(calls_path(tmp_path))
    assert {r["call_id"]: r["outcome"] for r in ledger} == client
    assert list(client.values()) == ["ok", "invalid_arguments", "tool_error", "timeout", "upstream_unavailable"]
    assert set(client.values()) <= set(OUTCOMES)
    assert {r["attempt"] for r in ledger} == {2} and {r["task_id"] for r in ledger} == {"t1"}
