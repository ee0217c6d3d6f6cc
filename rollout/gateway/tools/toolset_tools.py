"""Tool-set management tools, served when a gateway file sets `"dynamic_toolsets": true`.

The state they read and change is per run, task and attempt (`rollout/run_id`, `rollout/task_id`
and `rollout/attempt` in the request `_meta`); see `rollout.gateway.toolsets`.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from rollout.gateway.registry import ToolRegistry
from rollout.gateway.toolsets import ToolsetCatalog, ToolsetScope, ToolSetsResult, toolset_scope_of
from rollout.wire import TOOLSETS_GROUP

SetName = Annotated[str, Field(description="Name of a tool set, as list_toolsets shows it")]

_DESCRIPTION = "Manage tool sets: list them, and activate or deactivate a set to change which tools you can call."


def _catalog(ctx: Context) -> ToolsetCatalog:
    catalog: ToolsetCatalog | None = getattr(ctx.request_context.lifespan_context, "toolsets", None)
    if catalog is None:
        raise ToolError('tool sets are not dynamic on this gateway: set "dynamic_toolsets": true in its gateway file')
    return catalog


def _task(ctx: Context) -> ToolsetScope:
    return toolset_scope_of(ctx.request_context.params)


async def list_toolsets(ctx: Context) -> ToolSetsResult:
    """List the tool sets: name, description, tools, and whether each is active for you now.

    Only the tools of active sets can be called; activate a set to use its tools.
    """
    return _catalog(ctx).describe(_task(ctx))


async def activate_toolset(name: SetName, ctx: Context) -> ToolSetsResult:
    """Activate a tool set so that its tools can be called from your next step on."""
    return _switch(ctx, name, active=True)


async def deactivate_toolset(name: SetName, ctx: Context) -> ToolSetsResult:
    """Deactivate a tool set: its tools are no longer offered or callable until activated again."""
    return _switch(ctx, name, active=False)


def _switch(ctx: Context, name: str, *, active: bool) -> ToolSetsResult:
    catalog, task = _catalog(ctx), _task(ctx)
    try:
        (catalog.activate if active else catalog.deactivate)(task, name)
    except ValueError as e:
        raise ToolError(str(e)) from e
    return catalog.describe(task, changed=name)


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    registry.add(TOOLSETS_GROUP, list_toolsets, resource_type=TOOLSETS_GROUP, description=_DESCRIPTION)
    registry.add(TOOLSETS_GROUP, activate_toolset, resource_type=TOOLSETS_GROUP, description=_DESCRIPTION)
    registry.add(TOOLSETS_GROUP, deactivate_toolset, resource_type=TOOLSETS_GROUP, description=_DESCRIPTION)
