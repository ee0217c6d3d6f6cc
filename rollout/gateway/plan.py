"""A gateway's plan: which registered tools, tool sets and indexes a gateway file resolves to.

The plan is made before anything heavy loads (the gateway's indexes), so a bad gateway file (an unknown key or group,
a `fixed_params` entry no tool takes) fails before them, and the caller knows which indexes to load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.errors import ConfigError
from rollout.gateway.registry import ToolFn, ToolRegistry
from rollout.gateway.tool_params import check_fixed_params
from rollout.gateway.tools import builtin_registry
from rollout.gateway.toolsets import ToolSet
from rollout.gateway_file import GatewayFile
from rollout.wire import TOOLSETS_GROUP


@dataclass(frozen=True, slots=True)
class ServedTool:
    """A registered function the gateway will expose, with the group that brought it in."""

    fn: ToolFn
    """The registered function."""
    group: str
    """The group that brought it in."""
    resource_type: str
    """Module type of that group (`rag`, `system`, ...)."""
    fixed_params: Mapping[str, Any] = field(default_factory=dict)
    """Arguments the gateway file pins for it (the group's `fixed_params`), validated; hidden from its schema."""
    stage: str = "other"
    """Pipeline stage of its group (`rollout.accounting.Stage`)."""


@dataclass(frozen=True, slots=True)
class GatewayPlan:
    """What a gateway file resolves to against the registry."""

    tools: list[ServedTool]
    """Tools to register, in gateway-file order."""
    requires: list[str]
    """Indexes those tools need (`dense`, `sparse`)."""
    skipped_resource_types: list[str]
    """Module types this gateway has no tools for (served elsewhere)."""
    toolsets: list[ToolSet] = field(default_factory=list)
    """One tool set per served group of a `rag` module (`rollout.gateway_file.TOOLSET_RESOURCE_TYPE`)."""
    dynamic: bool = False
    """Tasks activate and deactivate sets (`dynamic_toolsets` in the gateway file)."""


def plan_gateway(gateway: GatewayFile, registry: ToolRegistry | None = None) -> GatewayPlan:
    """Resolve a gateway file's modules to the tools of `registry` (default: the shipped tool groups); an
    unknown key or group in a served module, or a `fixed_params` entry its tools do not take or whose value
    their schema rejects, raises `ConfigError`."""
    registry = registry if registry is not None else builtin_registry()
    served_types = {registry.group(g).resource_type for g in registry.group_names}
    gateway.check_served(served_types)
    tools: dict[ToolFn, ServedTool] = {}
    requires: dict[str, None] = {}
    skipped: dict[str, None] = {}
    for module in gateway.modules:
        if module.resource_type not in served_types:
            skipped[module.resource_type] = None
            continue
        for name in module.tool_groups:
            if name == TOOLSETS_GROUP and not gateway.dynamic_toolsets:
                raise ConfigError(
                    f'tool group {TOOLSETS_GROUP!r} is served only with "dynamic_toolsets": true; '
                    "set it in the gateway file, which then adds the group by itself"
                )
            group = registry.group(name)
            requires.update(dict.fromkeys(group.requires))
            pins = check_fixed_params(name, group.tools, gateway.group_entry(name).fixed_params)
            for fn in group.tools:
                clash = next((t for t in tools.values() if t.fn.__name__ == fn.__name__ and t.fn is not fn), None)
                if clash is not None:
                    raise ConfigError(
                        f"tool groups {clash.group!r} and {name!r} both serve a tool named {fn.__name__!r}, and a "
                        "gateway serves one tool per name. Keep one of the two groups in the gateway file"
                    )
                tools.setdefault(fn, ServedTool(fn, name, group.resource_type, pins.get(fn.__name__, {}), group.stage))
    if gateway.dynamic_toolsets:
        group = registry.group(TOOLSETS_GROUP)
        for fn in group.tools:
            tools.setdefault(fn, ServedTool(fn, TOOLSETS_GROUP, group.resource_type))
    served = list(tools.values())
    return GatewayPlan(
        served, list(requires), list(skipped), local_toolsets(gateway, served, registry), gateway.dynamic_toolsets
    )


def local_toolsets(gateway: GatewayFile, tools: Iterable[ServedTool], registry: ToolRegistry) -> list[ToolSet]:
    """The tool sets of a gateway plan's registered tools, in gateway-file order: one per group of a `rag` module.

    Groups of other resource types (`system_info`) are no tool set: the sets are for the RAG environment,
    which never offers them, so they are served always on (`rollout.gateway_file.TOOLSET_RESOURCE_TYPE`).
    """
    toolset_groups = set(gateway.toolset_groups())
    by_group: dict[str, list[str]] = {}
    for tool in tools:
        if tool.group in toolset_groups and tool.group != TOOLSETS_GROUP:
            by_group.setdefault(tool.group, []).append(tool.fn.__name__)
    sets = []
    for name, names in by_group.items():
        entry = gateway.group_entry(name)
        group = registry.group(name)
        sets.append(
            ToolSet(
                name=name,
                description=entry.description or group.description,
                tools=tuple(names),
                active=entry.active or not gateway.dynamic_toolsets,
                source="local",
                resource_type=group.resource_type,
            )
        )
    return sets
