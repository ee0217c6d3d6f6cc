"""HttpMCPRagEnv: an HttpMCPEnv that keeps only the RAG modules of a gateway file."""

from __future__ import annotations

import logging
from pathlib import Path

from envs.http_mcp_env import HttpMCPEnv
from rollout.gateway.config import GatewayFile

logger = logging.getLogger(__name__)

RAG_SYSTEM_PROMPT = (
    "You answer questions about a knowledge base. Search it with the tools provided, read the "
    "passages, search again if a question needs a fact about an entity you found, and reply with "
    "a short final answer only (a name, place, number or year), without explanation."
)


class HttpMCPRagEnv(HttpMCPEnv):
    """RAG environment: modules of other resource types (system, vm_pyautogui, ...) are dropped."""

    resource_type = "rag"

    def __init__(self, url: str, gateway_config_path: str | Path, **kwargs: object):
        kwargs.setdefault("system_prompt", RAG_SYSTEM_PROMPT)
        super().__init__(url, gateway_config_path, **kwargs)  # type: ignore[arg-type]

    def _load_gateway_config(self, config_path: str | Path) -> GatewayFile:
        config = super()._load_gateway_config(config_path)
        kept = [m for m in config.modules if m.resource_type == self.resource_type]
        dropped = sorted({m.resource_type for m in config.modules} - {self.resource_type})
        if dropped:
            logger.debug("RAG environment drops modules of type %s from %s", ", ".join(dropped), config_path)
        return config.model_copy(update={"modules": kept})
