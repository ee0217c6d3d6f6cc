"""Retrieval tools over the gateway's knowledge base."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from rollout.gateway.knowledge import KnowledgeBase, SearchResult
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.tool_params import KBDefault
from rollout.gateway.upstream import error_result
from rollout.retrieval.dense_shards import ShardUnavailable

Query = Annotated[str, Field(description="What to search for: a question, keywords or a name")]
# A plain integer with a default (not `int | None`): strict function-calling clients refuse a property without a
# `type`. The default is the gateway's `--default-top-k`, written into the schema when the gateway is built.
TopK = Annotated[int, Field(description="How many passages to return")]
TOP_K_DEFAULT = KBDefault("default_top_k")


def _search(ctx: Context, kind: str, query: str, top_k: int) -> SearchResult | CallToolResult:
    kb: KnowledgeBase = ctx.request_context.lifespan_context.kb
    try:
        return kb.search(kind, query, top_k)
    except ValueError as e:
        raise ToolError(str(e)) from e
    except ShardUnavailable as e:  # a dense shard on Ray Serve is down: the infrastructure failed, not the agent
        return error_result(str(e), outcome="upstream_unavailable")


def query_knowledge_base_dense(query: Query, ctx: Context, top_k: TopK = TOP_K_DEFAULT) -> SearchResult:
    """[Dense Search] Semantic vector search over the knowledge base.

    Finds passages whose meaning is close to the query, even when they use other words.
    Best for descriptive or paraphrased questions.
    """
    return _search(ctx, "dense", query, top_k)


def query_knowledge_base_sparse(query: Query, ctx: Context, top_k: TopK = TOP_K_DEFAULT) -> SearchResult:
    """[Sparse Search] Keyword (BM25) search over the knowledge base.

    Finds passages that contain the query's exact words. Best for names, codes and
    identifiers.
    """
    return _search(ctx, "sparse", query, top_k)


def query_knowledge_base_hybrid(query: Query, ctx: Context, top_k: TopK = TOP_K_DEFAULT) -> SearchResult:
    """[Hybrid Search] Semantic and keyword (BM25) search fused by reciprocal rank.

    Finds passages that either share the query's exact words or its meaning; one call covers
    names and identifiers as well as paraphrased questions.
    """
    return _search(ctx, "hybrid", query, top_k)


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    registry.add("rag_query", query_knowledge_base_dense, requires=("dense",), stage="retrieval")
    registry.add("rag_query_sparse", query_knowledge_base_sparse, requires=("sparse",), stage="retrieval")
    registry.add("rag_query_hybrid", query_knowledge_base_hybrid, requires=("hybrid",), stage="retrieval")
