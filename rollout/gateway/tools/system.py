"""System tools: facts about the gateway itself."""

from __future__ import annotations

from mcp.server.mcpserver import Context

from rollout.gateway.knowledge import CorpusInfo, KnowledgeBase
from rollout.gateway.registry import ToolRegistry


def get_corpus_info(ctx: Context) -> CorpusInfo:
    """Describe the knowledge base this gateway serves: size, loaded indexes and top_k limits."""
    kb: KnowledgeBase = ctx.request_context.lifespan_context.kb
    return CorpusInfo(
        num_passages=len(kb.passages),
        retrievers=sorted(kb.retrievers),
        default_top_k=kb.default_top_k,
        max_top_k=kb.max_top_k,
    )


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    registry.add("system_info", get_corpus_info, resource_type="system")
