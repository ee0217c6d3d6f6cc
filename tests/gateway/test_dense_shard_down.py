"""A dense shard on Ray Serve that is down (`ShardUnavailable`) fails every dense search tool as `upstream_unavailable`,
an infrastructure failure, and the ledger records it so; the shards themselves are tested on a cluster in
tests/run/test_serve_replicas.py."""

from __future__ import annotations

import json
from pathlib import Path

from mcp.client.client import Client

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import load_gateway_file
from rollout.jsonl import iter_jsonl
from rollout.records import Passage
from rollout.retrieval.dense_shards import ShardUnavailable
from rollout.wire import INFRA_OUTCOMES, META_CALL_ID, classify_result

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage number {i} about glassworks.") for i in range(6)]
TOOLS = {  # tool group -> (tool, arguments)
    "rag_query": ("query_knowledge_base_dense", {"query": "glassworks"}),
    "rag_search_dense": ("search_documents", {"query": "glassworks"}),
    "rag_recall_dense": ("recall_documents", {"query": "glassworks"}),
    "bcp_dense": ("search", {"query": "glassworks"}),
    "rag_retrieve_dense": ("retrieve_documents", {"query": "glassworks"}),
}


class _ShardDown:
    """A dense index one of whose shards does not answer."""

    name = "dense"

    def search(self, queries, k):
        raise ShardUnavailable("dense shard rollout-dense-flat-s2-0123-1 did not answer (TimeoutError: ...)")


async def test_every_dense_search_tool_fails_as_infrastructure_when_a_shard_is_down(tmp_path: Path) -> None:
    kb = KnowledgeBase(PASSAGES, {"dense": _ShardDown()})
    for group, (tool, arguments) in TOOLS.items():
        gateway = tmp_path / f"{group}.json"
        gateway.write_text(json.dumps({"modules": [{"resource_type": "rag", "tool_groups": [group]}]}))
        collector = StatsCollector(tmp_path / group)
        async with Client(build_gateway(load_gateway_file(gateway), kb, collector)) as client:
            result = await client.call_tool(tool, arguments, meta={META_CALL_ID: f"c-{group}"})
        collector.close()
        ok, outcome, error, _ = classify_result(result)
        assert (ok, outcome) == (False, "upstream_unavailable") and outcome in INFRA_OUTCOMES, (group, outcome, error)
        assert "did not answer" in error
        (call,) = iter_jsonl(collector.path)
        assert call["outcome"] == "upstream_unavailable", group
