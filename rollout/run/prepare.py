"""The run's first stage: everything checked and ready before any process starts.

The gateway file is checked against the modules a gateway serves (and kept to its RAG modules), the agent is built
and its endpoint asked once, the scorers imported and the question set and corpus prepared, so that bad input fails
in seconds with its one-line error, before the gateway, Ray or any worker starts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from envs.http_mcp_rag_env import keep_rag_modules
from rollout.data.dataset import PreparedData, prepare_data
from rollout.errors import ConfigError, RolloutError
from rollout.gateway.tools import SERVED_RESOURCE_TYPES
from rollout.gateway_file import GatewayFile, load_gateway_file
from rollout.report.user_scorers import load_scorers
from rollout.run.config import RunConfig
from rollout.run.resume import start_fresh
from rollout.run_folder import STATS_DIR

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the later stages start from."""

    gateway_file: GatewayFile
    agent: Any
    """The run's agent, built once here: the workers build their own from the same config."""
    data: PreparedData


def prepare(cfg: RunConfig) -> Prepared:
    """Check the run's input and prepare its data; a `RolloutError` names what to fix."""
    gateway_file = load_gateway_file(cfg.gateway_config_path)
    # A key no served module takes fails here, before data, gateway or Ray; an unknown tool group is refused by the
    # gateway (`gateway_for_run`), and a file that leaves the agent no tool fails here too.
    gateway_file.check_served(SERVED_RESOURCE_TYPES)
    keep_rag_modules(gateway_file, cfg.gateway_config_path)
    agent = check_agent(cfg.agent)
    load_scorers(cfg.scorers)  # a scorer that does not import fails now, not once every task has run
    data = prepare_data(cfg.dataset, cfg.cache_dir)
    (cfg.output_dir / STATS_DIR).mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        start_fresh(cfg.output_dir)
    logger.info("Mode %s: %d questions, gateway file %s", cfg.mode_name, len(data.questions),
                cfg.gateway_config_path)
    return Prepared(gateway_file, agent, data)


def check_agent(agent_config: dict[str, Any]) -> Any:
    """Build the agent once here, so a bad agent config or a dead LLM endpoint fails before the run starts."""
    try:
        agent = instantiate(agent_config)
    except InstantiationException as e:
        if isinstance(e.__cause__, RolloutError):
            raise e.__cause__ from None
        raise ConfigError(f"could not build agent {agent_config.get('_target_')}: {e.__cause__ or e}") from e
    check = getattr(agent, "check", None)
    if check is not None:
        asyncio.run(check())
    return agent


def check_agent_tools(agent: Any, tool_specs: list[dict[str, Any]]) -> None:
    """Let an agent whose config names tools (agent=tagged's search tags) refuse the offered ones before any task
    starts, with a `ConfigError` naming them, instead of failing every task."""
    check = getattr(agent, "check_tools", None)
    if check is not None:
        check(tool_specs)
