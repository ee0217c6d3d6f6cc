"""HttpMCPRagEnv: an HttpMCPEnv that keeps only the RAG modules of a gateway file."""

from __future__ import annotations

import logging
from pathlib import Path

from envs.http_mcp_env import HttpMCPEnv
from rollout.errors import ConfigError
from rollout.gateway_file import GatewayFile

logger = logging.getLogger(__name__)

RAG_SYSTEM_PROMPT = (
    "You answer questions about a knowledge base. Search it with the tools provided, read the "
    "passages, search again if a question needs a fact about an entity you found, and reply with "
    "a short final answer only (a name, place, number or year), without explanation."
)


RAG_RESOURCE_TYPE = "rag"
"""The one module resource type the RAG environment serves."""


def keep_rag_modules(config: GatewayFile, source: str | Path, resource_type: str = RAG_RESOURCE_TYPE) -> GatewayFile:
    """`config` with only its modules of `resource_type`; a `ConfigError` when that drops every tool.

    Modules of other types (system, vm_pyautogui, ...) are dropped on purpose, but a file whose
    kept modules bring no tool group while dropped ones name some (a typo such as
    `"resource_type": "RAG"`, or a file meant for another environment) would give the agent no
    tool at all and every answer would be a guess; that is refused, naming the modules. A file
    that names no group anywhere (`rag_no_tool.json`) is the no-tool baseline and is kept.
    """
    kept = [m for m in config.modules if m.resource_type == resource_type]
    dropped = [(i, m) for i, m in enumerate(config.modules, start=1) if m.resource_type != resource_type]
    if dropped:
        logger.debug("RAG environment drops modules of type %s from %s",
                      ", ".join(sorted({m.resource_type for _, m in dropped})), source)
    if not any(m.group_names for m in kept) and any(m.group_names for _, m in dropped):
        described = "; ".join(
            f"module {i} has resource_type {m.resource_type!r} (tool groups {', '.join(m.group_names)})"
            + (f", did you mean {resource_type!r}?" if m.resource_type.strip().lower() == resource_type else "")
            for i, m in dropped if m.group_names
        )
        raise ConfigError(
            f"gateway file {source} gives the RAG environment no tool: it serves modules of resource type "
            f"{resource_type!r} only, and none of those names a tool group. {described}. Set the module's "
            f'"resource_type" to "{resource_type}", or use rag_no_tool.json for a run without tools'
        )
    return config.model_copy(update={"modules": kept})


class HttpMCPRagEnv(HttpMCPEnv):
    """RAG environment: modules of other resource types (system, vm_pyautogui, ...) are dropped."""

    resource_type = RAG_RESOURCE_TYPE

    def __init__(self, url: str, gateway_config_path: str | Path, **kwargs: object):
        kwargs.setdefault("system_prompt", RAG_SYSTEM_PROMPT)
        super().__init__(url, gateway_config_path, **kwargs)  # type: ignore[arg-type]

    def _load_gateway_config(self, config_path: str | Path) -> GatewayFile:
        return keep_rag_modules(super()._load_gateway_config(config_path), config_path, self.resource_type)
