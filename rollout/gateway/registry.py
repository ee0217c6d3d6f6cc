"""Tool registry: decorator-registered tool groups, read by the gateway.

Registration at import is the registry's only mutation. The gateway asks it which
functions belong to the groups a gateway file names and builds its own tool list, so
nothing downstream needs resetting between runs or tests.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rollout.errors import UnknownToolGroupError

logger = logging.getLogger(__name__)

ToolFn = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """A named set of tools that a gateway file switches on or off together."""

    name: str
    """Group name used in gateway files, e.g. `rag_query`."""
    resource_type: str
    """Module type the group belongs to (`rag`, `system`, ...)."""
    requires: tuple[str, ...]
    """Indexes the group's tools need loaded (`dense`, `sparse`)."""
    tools: tuple[ToolFn, ...]
    """Registered functions, in registration order."""
    summary: str | None = None
    """Description given at registration; None builds one from the tools' docstrings."""

    @property
    def description(self) -> str:
        """What the group offers, for the model: the registered summary, else the first
        docstring line of each tool, joined."""
        if self.summary:
            return self.summary
        lines = (_first_line(fn) for fn in self.tools)
        return " ".join(dict.fromkeys(line for line in lines if line))


def _first_line(fn: ToolFn) -> str:
    doc = (fn.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


class ToolRegistry:
    """Class-level registry of tool groups; use `register_tool(group)` as a decorator."""

    _groups: ClassVar[dict[str, ToolGroup]] = {}
    _discovered: ClassVar[set[str]] = set()

    @classmethod
    def register_tool(
        cls,
        group: str,
        *,
        resource_type: str = "rag",
        requires: Iterable[str] = (),
        description: str | None = None,
    ) -> Callable[[ToolFn], ToolFn]:
        """Register the decorated function as a tool of `group`.

        `description` describes the whole group (a tool set the model can read about); without
        one the group is described by the first docstring line of its tools.
        """
        if callable(group):
            raise TypeError(
                "register_tool takes a group name: write @ToolRegistry.register_tool('group'), "
                "not @ToolRegistry.register_tool. Did you forget to call it?"
            )

        def decorator(fn: ToolFn) -> ToolFn:
            existing = cls._groups.get(group)
            if existing is not None and existing.resource_type != resource_type:
                raise ValueError(
                    f"tool group {group!r} is registered as {existing.resource_type!r}, "
                    f"cannot add {fn.__name__} as {resource_type!r}"
                )
            tools = existing.tools if existing else ()
            if fn not in tools:
                tools = (*tools, fn)
            summary = existing.summary if existing else None
            if description is not None and summary is not None and description != summary:
                raise ValueError(
                    f"tool group {group!r} already has the description {summary!r}; "
                    f"{fn.__name__} gives another one. Describe a group once."
                )
            needs = tuple(dict.fromkeys((*(existing.requires if existing else ()), *requires)))
            cls._groups[group] = ToolGroup(group, resource_type, needs, tools, description or summary)
            logger.debug("registered tool %s in group %s", fn.__name__, group)
            return fn

        return decorator

    @classmethod
    def autodiscover(cls, package: str = "rollout.gateway.tools") -> None:
        """Import every module of `package` so its decorators run."""
        if package in cls._discovered:
            return
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{package}."):
            importlib.import_module(info.name)
        cls._discovered.add(package)

    @classmethod
    def group_names(cls) -> list[str]:
        return list(cls._groups)

    @classmethod
    def get_group(cls, name: str) -> ToolGroup:
        try:
            return cls._groups[name]
        except KeyError:
            raise UnknownToolGroupError(name, cls._groups) from None

    @classmethod
    def get_tools_by_group(cls, name: str) -> list[ToolFn]:
        return list(cls.get_group(name).tools)

    @classmethod
    def get_tools_by_config(cls, module: Mapping[str, Any]) -> list[ToolFn]:
        """Tools of the groups a gateway module names, de-duplicated, in order."""
        ordered: dict[ToolFn, None] = {}
        for name in module.get("tool_groups", []):
            ordered.update(dict.fromkeys(cls.get_tools_by_group(name)))
        return list(ordered)
