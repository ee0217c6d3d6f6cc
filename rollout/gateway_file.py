"""Gateway files: which tool groups of which resource types an MCP gateway serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rollout.errors import ConfigError
from rollout.paths import CONF_DIR, PROJECT_ROOT

GATEWAYS_DIR = CONF_DIR / "gateways"
"""The gateway files shipped with the project."""


class ToolGroupEntry(BaseModel):
    """A tool group written as an object, `{"name": "rag_query", "active": false, "fixed_params": {"top_k": 5}}`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Registered group name."""
    active: bool = True
    """Whether the group's tool set is active when a task starts (with `dynamic_toolsets`)."""
    description: str | None = None
    """What `list_toolsets` says about the set; None uses the registered group description."""
    fixed_params: dict[str, Any] = Field(default_factory=dict)
    """Arguments pinned for the group's tools: hidden from their input schema, and every call runs with
    these values whatever the client sends (see `rollout.gateway.tool_params`)."""


class GatewayModule(BaseModel):
    """One module of a gateway file: a resource type and the tool groups it exposes."""

    model_config = ConfigDict(extra="allow")

    resource_type: str
    """`rag`, `system`, or a type another gateway serves (e.g. `vm_pyautogui`)."""
    tool_groups: list[str] = Field(default_factory=list)
    """Registered tool groups to expose, in order (names, also when written as objects)."""
    group_options: dict[str, ToolGroupEntry] = Field(default_factory=dict)
    """Groups written as objects in `tool_groups`, by name."""
    source: Literal["local", "mcp"] = "local"
    """`local`: registered tool groups; `mcp`: the tools of the MCP server at `url`, as one group `name`."""
    url: str | None = None
    """With `source: mcp`, the upstream server's MCP URL (streamable HTTP, or SSE when it ends with /sse)."""
    name: str | None = None
    """With `source: mcp`, the tool-set (group) name of the upstream's tools."""
    tools: list[str] | None = None
    """With `source: mcp`, the upstream tools to serve; all of them when absent."""

    @model_validator(mode="after")
    def _check_source(self) -> GatewayModule:
        if self.source == "mcp":
            if not self.url or not self.url.startswith(("http://", "https://")) or not self.name:
                raise ValueError(
                    'a "source": "mcp" module needs "url" (http://...) and "name", e.g. {"resource_type": "rag", '
                    '"source": "mcp", "name": "wiki", "url": "http://127.0.0.1:9000/mcp"}'
                )
            if self.tool_groups:
                raise ValueError('a "source": "mcp" module serves the upstream\'s tools: list them in "tools", '
                                 'not "tool_groups"')
        elif self.url is not None or self.tools is not None:
            raise ValueError('"url" and "tools" belong to upstream modules: add "source": "mcp"')
        return self

    @property
    def group_names(self) -> list[str]:
        """The groups this module brings: its `tool_groups`, or its `name` for an upstream module."""
        return [self.name] if self.source == "mcp" and self.name else list(self.tool_groups)

    @model_validator(mode="before")
    @classmethod
    def _split_group_objects(cls, data: Any) -> Any:
        # Object-form groups become a name in `tool_groups` plus an entry in `group_options`,
        # so code that reads `tool_groups` as names keeps working.
        if not isinstance(data, dict) or not isinstance(data.get("tool_groups"), list):
            return data
        names: list[Any] = []
        options = dict(data.get("group_options") or {})
        for entry in data["tool_groups"]:
            if isinstance(entry, dict):
                if not isinstance(entry.get("name"), str):
                    raise ValueError(
                        'a tool group written as an object needs a "name", e.g. '
                        '{"name": "rag_query_sparse", "active": false}'
                    )
                options.setdefault(entry["name"], entry)
                entry = entry["name"]
            names.append(entry)
        return {**data, "tool_groups": names, "group_options": options}


FILTER_GROUP, GENERATE_GROUP, VISUALIZE_GROUP = "rag_filter", "rag_generate", "rag_visualize"
"""Step tool groups the run side must know by name (registered in `rollout.gateway.tools.pipeline`)."""
STEP_LLM_GROUPS = (FILTER_GROUP, GENERATE_GROUP)
"""Tool groups whose tools call the run's `llm:` endpoint when one is configured (relevance filter, answer)."""


class GatewayFile(BaseModel):
    """A gateway file as written on disk."""

    model_config = ConfigDict(extra="allow")

    server_name: str = "rollout-gateway"
    """Name the MCP server announces."""
    modules: list[GatewayModule] = Field(default_factory=list)
    """Modules to serve; the RAG environment keeps only `resource_type == "rag"`."""
    dynamic_toolsets: bool = False
    """Each group is a tool set a task may activate and deactivate (`list_toolsets`,
    `activate_toolset`, `deactivate_toolset`); a group's `active` sets where it starts."""

    def tool_groups(self) -> list[str]:
        """All groups named by the modules (an upstream module's is its `name`), de-duplicated, in order."""
        return list(dict.fromkeys(g for m in self.modules for g in m.group_names))

    @property
    def uses_step_llm(self) -> bool:
        """Whether a group it serves asks the run's LLM endpoint itself (`STEP_LLM_GROUPS`)."""
        return any(g in STEP_LLM_GROUPS for g in self.tool_groups())

    def group_entry(self, name: str) -> ToolGroupEntry:
        """How the file writes group `name`: its object form, or the defaults for a plain string."""
        for module in self.modules:
            if name in module.group_options:
                return module.group_options[name]
        return ToolGroupEntry(name=name)

    def active_groups(self) -> list[str]:
        """Groups whose tool set is active when a task starts: all of them unless `dynamic_toolsets`."""
        groups = self.tool_groups()
        return [g for g in groups if self.group_entry(g).active] if self.dynamic_toolsets else groups


def available_gateway_files(near: Path | None = None) -> list[str]:
    """Gateway files beside `near` and in the project's conf/gateways, for error messages."""
    dirs = [GATEWAYS_DIR] + ([near.parent] if near is not None and near.parent.is_dir() else [])
    found = {_short(p) for d in dict.fromkeys(dirs) for p in sorted(d.glob("*.json"))}
    return sorted(found)


def _short(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def load_gateway_file(path: str | Path) -> GatewayFile:
    """Read and validate a gateway file; every failure is a `ConfigError` that names the fix."""
    path = Path(path)
    if not path.is_file():
        listing = ", ".join(available_gateway_files(path)) or "(none found)"
        raise ConfigError(f"gateway file not found: {path}. Set gateway_config_path= to one of: {listing}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is not an error
    except json.JSONDecodeError as e:
        raise ConfigError(f"gateway file {path} is not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
    try:
        return GatewayFile.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '(top)'}: {err['msg']}" for err in e.errors())
        raise ConfigError(
            f"gateway file {path} is malformed ({problems}). Expected "
            '{"server_name": "...", "modules": [{"resource_type": "rag", "tool_groups": ["rag_query"]}]}'
        ) from e
