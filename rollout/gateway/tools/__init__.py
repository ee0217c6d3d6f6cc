"""The tool groups rollout ships, and the registry that serves them."""

from __future__ import annotations

from rollout.gateway.registry import ToolRegistry
from rollout.gateway.tools import documents, pipeline, rag, system, toolset_tools

_MODULES = (rag, documents, pipeline, system, toolset_tools)


def builtin_registry() -> ToolRegistry:
    """A new registry holding every shipped tool group (rag_query*, rag_search*, rag_recall*, the pipeline steps, system_info, toolsets)."""
    registry = ToolRegistry()
    for module in _MODULES:
        module.register(registry)
    return registry
