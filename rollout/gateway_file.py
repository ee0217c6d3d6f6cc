"""Gateway files: which tool groups of which resource types an MCP gateway serves.

Keys are checked, so a typo cannot pass for a setting: an unknown key at the top of the file is an
error at load time, and one in a module this gateway serves (a local module of a resource type its
registry has tools for, or any upstream `source: mcp` module) is an error when the gateway plans it
(`GatewayFile.check_served`), before anything loads. A module of another resource type (e.g.
`vm_pyautogui`) is kept as written and skipped: its keys belong to the gateway that serves it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from rollout.errors import ConfigError
from rollout.paths import CONF_DIR, PROJECT_ROOT
from rollout.wire import is_http_url

GATEWAYS_DIR = CONF_DIR / "gateways"
"""The gateway files shipped with the project."""

TOOLSET_RESOURCE_TYPE = "rag"
"""Tool sets are the groups of modules of this resource type. `list_toolsets` and its siblings are served to
the RAG environment, which keeps only these modules, so a set of another type (`system_info`) is one its
callers could never use: with `dynamic_toolsets`, groups of other types are served always on, outside every set."""

FILE_KEYS = ("server_name", "modules", "dynamic_toolsets")
"""Keys the top level of a gateway file takes."""
LOCAL_MODULE_KEYS = ("resource_type", "source", "tool_groups")
"""Keys a module of registered tool groups takes."""
UPSTREAM_MODULE_KEYS = ("resource_type", "source", "name", "url", "tools", "fixed_params", "active", "description")
"""Keys an upstream (`"source": "mcp"`) module takes."""
GROUP_KEYS = ("name", "active", "description", "fixed_params")
"""Keys a tool group written as an object takes."""
_TOOLSET_KEYS = ("fixed_params", "active", "description")
"""Keys that describe one tool set: a group object's, or an upstream module's for its one set."""


class ToolGroupEntry(BaseModel):
    """A tool group written as an object, `{"name": "rag_query", "active": false, "fixed_params": {"top_k": 5}}`."""

    # Unknown keys are kept so that a module of another gateway's resource type stays as written;
    # `GatewayFile.check_served` refuses them in the modules this gateway serves.
    model_config = ConfigDict(extra="allow")

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

    # As for group objects: unknown keys are kept, and refused in the modules this gateway serves.
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
    fixed_params: dict[str, Any] = Field(default_factory=dict)
    """With `source: mcp`, arguments pinned for the upstream's tools, as a group object's `fixed_params`: hidden
    from their input schemas, and every forwarded call carries these values whatever the client sends."""
    active: bool = True
    """With `source: mcp`, whether its tool set is active when a task starts (with `dynamic_toolsets`)."""
    description: str | None = None
    """With `source: mcp`, what `list_toolsets` says about its tool set; None names the upstream's URL."""

    @model_validator(mode="after")
    def _check_source(self) -> GatewayModule:
        if self.source == "mcp":
            if not is_http_url(self.url) or not self.name:
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

    def entries(self) -> list[ToolGroupEntry]:
        """Each group as the file writes it: an upstream module is the entry of its one set."""
        if self.source == "mcp" and self.name:
            return [ToolGroupEntry(name=self.name, active=self.active, description=self.description,
                                   fixed_params=self.fixed_params)]
        return [self.group_options.get(name) or ToolGroupEntry(name=name) for name in self.tool_groups]

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

    model_config = ConfigDict(extra="forbid")

    server_name: str = "rollout-gateway"
    """Name the MCP server announces."""
    modules: list[GatewayModule] = Field(default_factory=list)
    """Modules to serve; the RAG environment keeps only `resource_type == "rag"`."""
    dynamic_toolsets: bool = False
    """Each group of a `rag` module is a tool set a task may activate and deactivate (`list_toolsets`,
    `activate_toolset`, `deactivate_toolset`); a group's `active` sets where it starts."""

    _source: str | None = PrivateAttr(default=None)
    """The path it was read from (`load_gateway_file`), for messages."""

    @property
    def label(self) -> str:
        """How messages name the file: `gateway file PATH`."""
        return f"gateway file {self._source}" if self._source else "gateway file"

    def tool_groups(self) -> list[str]:
        """All groups named by the modules (an upstream module's is its `name`), de-duplicated, in order."""
        return list(dict.fromkeys(g for m in self.modules for g in m.group_names))

    def toolset_groups(self) -> list[str]:
        """The groups that are tool sets: those of `TOOLSET_RESOURCE_TYPE` modules, in order."""
        return list(dict.fromkeys(g for m in self.modules if m.resource_type == TOOLSET_RESOURCE_TYPE
                                  for g in m.group_names))

    @property
    def uses_step_llm(self) -> bool:
        """Whether a group it serves asks the run's LLM endpoint itself (`STEP_LLM_GROUPS`)."""
        return any(g in STEP_LLM_GROUPS for g in self.tool_groups())

    def group_entry(self, name: str) -> ToolGroupEntry:
        """How the file writes group `name`: its object form (an upstream module's settings for its set), or the
        defaults for a plain string."""
        for module in self.modules:
            if (module.source == "mcp" and module.name == name) or name in module.group_options:
                return next(e for e in module.entries() if e.name == name)
        return ToolGroupEntry(name=name)

    def active_groups(self) -> list[str]:
        """Groups whose tool set is active when a task starts: all of them unless `dynamic_toolsets`."""
        groups = self.tool_groups()
        return [g for g in groups if self.group_entry(g).active] if self.dynamic_toolsets else groups

    def check_served(self, served_types: Collection[str]) -> None:
        """Refuse, as a one-line `ConfigError`, what the modules this gateway serves write and it would not honour.

        A module is served when it is an upstream one, or a local one whose resource type is in `served_types`
        (the registry's); the others are skipped as written. In a served module: an unknown key (named with the
        nearest valid one), `fixed_params`, `active` or `description` at module level of a local module (they
        belong to a group object), and `"active": false` or a `description` where there is no tool set to
        describe (without `dynamic_toolsets`, or on a group of another resource type than `rag`).
        """
        for index, module in enumerate(self.modules, start=1):
            if module.source == "local" and module.resource_type not in served_types:
                continue  # its keys are for the gateway that serves this resource type
            where = f"{self.label}: module {index}"
            _check_module_keys(where, module)
            for entry in module.entries():
                if entry.model_extra:
                    key = next(iter(entry.model_extra))
                    raise _unknown_key(f"{where}, tool group {entry.name!r}", key, GROUP_KEYS,
                                       _nearest(key, GROUP_KEYS))
                self._check_toolset_settings(where, module, entry)

    def _check_toolset_settings(self, where: str, module: GatewayModule, entry: ToolGroupEntry) -> None:
        written = [text for text, value, default in (('"active": false', entry.active, True),
                                                     ('"description"', entry.description, None)) if value != default]
        if not written:
            return
        what = " and ".join(written)
        if not self.dynamic_toolsets:
            raise ConfigError(
                f"{where} writes {what} for tool group {entry.name!r}, which only a tool set takes, and this file "
                'serves none. Set "dynamic_toolsets": true at the top of the file to serve its groups as tool sets, '
                f"or drop {what}"
            )
        if module.resource_type != TOOLSET_RESOURCE_TYPE:
            raise ConfigError(
                f"{where} writes {what} for tool group {entry.name!r} of resource type {module.resource_type!r}, "
                f"but tool sets are the groups of {TOOLSET_RESOURCE_TYPE!r} modules (the RAG environment's); "
                f"{entry.name!r} is served always on. Drop {what}"
            )


def _check_module_keys(where: str, module: GatewayModule) -> None:
    extra = module.model_extra or {}
    if module.source == "mcp":
        if extra:
            key = next(iter(extra))
            raise _unknown_key(where, key, UPSTREAM_MODULE_KEYS, _nearest(key, UPSTREAM_MODULE_KEYS))
        return
    if extra:
        key = next(iter(extra))
        guess = _nearest(key, (*LOCAL_MODULE_KEYS, *_TOOLSET_KEYS))
        hint = (f"; a local module writes {guess} in a group object, {_group_object(module, guess, extra[key])}"
                if guess in _TOOLSET_KEYS else "")
        raise _unknown_key(where, key, LOCAL_MODULE_KEYS, guess, hint)
    if module.name is not None:
        raise ConfigError(f'{where} writes "name", which names the tool set of an upstream module: add '
                          '"source": "mcp" and its "url", or drop "name" (a local module\'s groups are its tool_groups)')
    for key, value, default in (("fixed_params", module.fixed_params, {}), ("active", module.active, True),
                                ("description", module.description, None)):
        if value != default:
            raise ConfigError(
                f'{where} writes "{key}" at module level, which only an upstream ("source": "mcp") module takes. '
                f"Write the group as an object in tool_groups: {_group_object(module, key, value)}"
            )


def _group_object(module: GatewayModule, key: str, value: Any) -> str:
    """An example group object of the module's first group, carrying `key: value`."""
    return json.dumps({"name": module.tool_groups[0] if module.tool_groups else "rag_query", key: value})


def _nearest(key: str, valid: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown_key(where: str, key: str, valid: Sequence[str], guess: str | None, hint: str = "") -> ConfigError:
    """`WHERE has an unknown key "k" (did you mean "g"? valid keys: ...)`, one line."""
    mean = f'did you mean "{guess}"? ' if guess else ""
    return ConfigError(f'{where} has an unknown key "{key}" ({mean}valid keys: {", ".join(valid)}{hint})')


def available_gateway_files(near: Path | None = None) -> list[str]:
    """The shipped gateway files (conf/gateways), and those of the folder `near` names, for error messages.

    That folder counts only when the path names one (not a bare file name), it exists and it is not the
    filesystem root: `/nonexistent.json` lists the shipped files, not every `.json` file of `/`."""
    dirs = [GATEWAYS_DIR]
    if near is not None:
        folder = near if near.is_dir() else near.parent
        if folder.parts and folder.is_dir() and folder.resolve() != Path(folder.resolve().anchor):
            dirs.append(folder)
    found = {_short(p) for d in dict.fromkeys(dirs) for p in sorted(d.glob("*.json"))}
    return sorted(found)


def _short(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def load_gateway_file(path: str | Path, option: str = "gateway_config_path=") -> GatewayFile:
    """Read and validate a gateway file; every failure is a `ConfigError` that names the fix (`option`: how the
    command at hand names the file, a run's override or the gateway's `--config`).

    Keys inside the modules are checked by `GatewayFile.check_served` when a gateway plans the file
    (`rollout.gateway.plan.plan_gateway`): which modules it serves depends on its tool registry. A run checks them
    against the shipped groups' module types before anything starts (`rollout.gateway.tools.SERVED_RESOURCE_TYPES`).
    """
    path = Path(path)
    if not path.is_file():
        listing = ", ".join(available_gateway_files(path)) or "(none found)"
        raise ConfigError(f"gateway file not found: {path}. Set {option} to one of: {listing}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is not an error
    except json.JSONDecodeError as e:
        raise ConfigError(f"gateway file {path} is not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
    unknown = [key for key in raw if key not in FILE_KEYS] if isinstance(raw, dict) else []
    if unknown:
        raise _unknown_key(f"gateway file {path}", unknown[0], FILE_KEYS, _nearest(unknown[0], FILE_KEYS))
    try:
        gateway = GatewayFile.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '(top)'}: {err['msg']}" for err in e.errors())
        raise ConfigError(
            f"gateway file {path} is malformed ({problems}). Expected "
            '{"server_name": "...", "modules": [{"resource_type": "rag", "tool_groups": ["rag_query"]}]}'
        ) from e
    gateway._source = str(path)
    return gateway
