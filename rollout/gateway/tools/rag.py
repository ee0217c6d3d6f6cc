"""Retrieval tools over the gateway's knowledge base."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from rollout.gateway.knowledge import KnowledgeBase, SearchResult
from rollout.gateway.registry import ToolRegistry

Query = Annotated[str, Field(description="What to search for: a question, keywords or a name")]
TopK = Annotated[int | None, Field(description="How many passages to return (default 5)")]


def _search(ctx: Context, kind: str, query: str, top_k: int | None) -> SearchResult:
    kb: KnowledgeBase = ctx.request_context.lifespan_context.kb
    try:
        return kb.search(kind, query, top_k)
    except ValueError as e:
        raise ToolError(str(e)) from e


@ToolRegistry.register_tool("rag_query", requires=("dense",))
def query_knowledge_base_dense(query: Query, ctx: Context, top_k: TopK = None) -> SearchResult:
    """[Dense Search] Semantic vector search over the knowledge base.

    Finds passages whose meaning is close to the query, even when they use other words.
    Best for descriptive or paraphrased questions.
    """
    return _search(ctx, "dense", query, top_k)


@ToolRegistry.register_tool("rag_query_sparse", requires=("sparse",))
def query_knowledge_base_sparse(query: Query, ctx: Context, top_k: TopK = None) -> SearchResult:
    """[Sparse Search] Keyword (BM25) search over the knowledge base.

    Finds passages that contain the query's exact words. Best for names, codes and
    identifiers.
    """
    return _search(ctx, "sparse", query, top_k)


@ToolRegistry.register_tool("rag_query_hybrid", requires=("hybrid",))
def query_knowledge_base_hybrid(query: Query, ctx: Context, top_k: TopK = None) -> SearchResult:
    """[Hybrid Search] Semantic and keyword (BM25) search fused by reciprocal rank.

    Finds passages that either share the query's exact words or its meaning; one call covers
    names and identifiers as well as paraphrased questions.
    """
    return _search(ctx, "hybrid", query, top_k)
