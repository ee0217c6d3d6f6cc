"""Gateway files: which tool groups of which resource types an MCP gateway serves."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.errors import ConfigError
from rollout.paths import CONF_DIR, PROJECT_ROOT

GATEWAYS_DIR = CONF_DIR / "gateways"
"""The gateway files shipped with the project."""


class GatewayModule(BaseModel):
    """One module of a gateway file: a resource type and the tool groups it exposes."""

    model_config = ConfigDict(extra="allow")

    resource_type: str
    """`rag`, `system`, or a type another gateway serves (e.g. `vm_pyautogui`)."""
    tool_groups: list[str] = Field(default_factory=list)
    """Registered tool groups to expose, in order."""


class GatewayFile(BaseModel):
    """A gateway file as written on disk."""

    model_config = ConfigDict(extra="allow")

    server_name: str = "rollout-gateway"
    """Name the MCP server announces."""
    modules: list[GatewayModule] = Field(default_factory=list)
    """Modules to serve; the RAG environment keeps only `resource_type == "rag"`."""

    def tool_groups(self) -> list[str]:
        """All groups named by the modules, de-duplicated, in order."""
        return list(dict.fromkeys(g for m in self.modules for g in m.tool_groups))


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
        raw = json.loads(path.read_text(encoding="utf-8"))
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
