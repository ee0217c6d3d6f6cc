"""The tool groups rollout ships, and the registry that serves them."""

from __future__ import annotations

from rollout.gateway.registry import ToolRegistry

SERVED_RESOURCE_TYPES = ("rag", "system", "toolsets")
"""The module types the shipped groups serve (held to `builtin_registry()` by a test): a run checks its gateway file's
modules against them (`GatewayFile.check_served`) before its gateway, which imports the tool modules, starts."""


def builtin_registry() -> ToolRegistry:
    """A new registry holding every shipped tool group (rag_query*, rag_search*, rag_recall*, the pipeline steps,
    BrowseComp-Plus' bcp_*, system_info, toolsets)."""
    # Imported here: the tool modules import the MCP server (half a second), which what only checks a gateway file's
    # module types need not pay.
    from rollout.gateway.tools import browsecomp, documents, pipeline, rag, system, toolset_tools

    registry = ToolRegistry()
    for module in (rag, documents, pipeline, browsecomp, system, toolset_tools):
        module.register(registry)
    return registry
