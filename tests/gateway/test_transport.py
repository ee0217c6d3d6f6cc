"""Transports and limits: SSE end to end with HttpMCPEnv, and the gateway-side per-call timeout."""

import asyncio
import json
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from mcp.client.client import Client

from envs import HttpMCPRagEnv
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import GATEWAYS_DIR
from rollout.report import load_calls
from rollout.retrieval import Hits
from rollout.run.gateway_process import GatewayProcess
from rollout.wire import META_CALL_ID
from tests.gateway.loopback import PASSAGES, SPARSE_MODULE, gateway_file, gateway_served, sparse_kb

SPARSE_FILE = GATEWAYS_DIR / "rag_sparse_only.json"


async def test_sse_transport_end_to_end_with_the_env(tmp_path):
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), tmp_path, transport="sse") as base:
        async with HttpMCPRagEnv(f"{base}/sse", SPARSE_FILE, worker_id="w-sse") as env:
            task = env.for_task("t-sse")
            ok = await task.call_tool("query_knowledge_base_sparse", {"query": "Voss born"})
            bad = await task.call_tool("query_knowledge_base_sparse", {"query": "Voss", "top_k": "lots"})
    assert [t.name for t in env.tools] == ["query_knowledge_base_sparse"]
    assert ok.ok and ok.structured["results"][0]["id"] == "d0"
    assert not bad.ok and [c.outcome for c in task.calls] == ["ok", "invalid_arguments"]
    stats = load_calls(tmp_path)
    assert stats["call_id"].tolist() == [c.call_id for c in task.calls]
    assert set(stats["task_id"]) == {"t-sse"} and set(stats["worker_id"]) == {"w-sse"}


async def test_sse_transport_with_a_token():
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), transport="sse", auth_token="tok") as base:
        async with HttpMCPRagEnv(f"{base}/sse", SPARSE_FILE, auth_token="tok") as env:
            result = await env.for_task("t").call_tool("query_knowledge_base_sparse", {"query": "Kelmor"})
    assert result.ok


class BlockedRetriever:
    """A sync retriever that searches only once released: its tool sits on a worker thread until then."""

    def __init__(self):
        self.release = threading.Event()
        self.finished = threading.Event()

    def search(self, queries: Sequence[str], k: int) -> Hits:
        self.release.wait(60)
        self.finished.set()
        return Hits(np.zeros((len(queries), 1), dtype=np.int64), np.ones((len(queries), 1), dtype=np.float32))


async def test_a_call_over_the_tool_timeout_is_an_error_recorded_as_timeout(tmp_path):
    blocked = BlockedRetriever()
    kb = KnowledgeBase(PASSAGES, {"sparse": blocked})
    collector = StatsCollector(tmp_path / "tool_stats")
    server = build_gateway(gateway_file(SPARSE_MODULE), kb, collector, tool_timeout_s=0.2)
    async with Client(server) as client:
        result = await client.call_tool("query_knowledge_base_sparse", {"query": "Voss"}, meta={META_CALL_ID: "c1"})
        answered_while_the_tool_still_ran = not blocked.finished.is_set()
        blocked.release.set()
    collector.close()
    assert result.is_error and "timed out after 0.2 s on the gateway (--tool-timeout-s)" in result.content[0].text
    assert answered_while_the_tool_still_ran
    stats = load_calls(tmp_path)
    assert stats[["call_id", "outcome", "ok"]].values.tolist() == [["c1", "timeout", False]]


async def test_calls_under_the_timeout_are_unchanged(tmp_path):
    server = build_gateway(gateway_file(SPARSE_MODULE), sparse_kb(), tool_timeout_s=30)
    async with Client(server) as client:
        result = await client.call_tool("query_knowledge_base_sparse", {"query": "Voss"})
    assert not result.is_error and result.structured_content["results"][0]["id"] == "d0"


def test_cli_serves_sse_with_a_token_and_timeout(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "contents": f"{p.title}\n{p.text}"}) + "\n" for p in PASSAGES))
    args = ["--config", str(SPARSE_FILE), "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"),
            "--output-dir", str(tmp_path), "--transport", "sse", "--tool-timeout-s", "30"]
    with GatewayProcess(args, auth_token="cli-token", ready_timeout_s=120) as gw:
        url = gw.wait_ready()
        assert url.endswith("/sse")

        async def call() -> bool:
            async with HttpMCPRagEnv(url, SPARSE_FILE, auth_token="cli-token") as env:
                return (await env.for_task("t").call_tool("query_knowledge_base_sparse", {"query": "Kelmor"})).ok

        assert asyncio.run(call())
    assert load_calls(tmp_path)["outcome"].tolist() == ["ok"]


@pytest.mark.parametrize("value", ["0", "-1"])
def test_cli_rejects_a_non_positive_timeout(value, capsys):
    from rollout.gateway.cli import main

    assert main(["--config", str(SPARSE_FILE), "--tool-timeout-s", value]) == 2
    assert "--tool-timeout-s must be positive" in capsys.readouterr().err
