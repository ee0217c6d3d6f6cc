"""The run's second stage: its gateway and Ray up, the workers started, the tools listed.

The gateway loads its encoder and indexes while Ray starts, and the worker processes start (and import) while the
gateway loads; then the tools the workers' environments will offer are listed once, for the run's identity, its
tools.json and the agent's own check of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.run.config import GatewayConfig, RunConfig
from rollout.run.gateway_kinds import RunGateway, gateway_for_run
from rollout.run.prepare import Prepared, check_agent_tools
from rollout.run.ray_session import ray_session
from rollout.run.scheduler import start_actors
from rollout.run.timeline import Timeline
from rollout.run.worker import EnvSpec
from rollout.wire import resolve_token

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Served:
    """What the roll-out stage runs on."""

    gateway: RunGateway
    env_spec: EnvSpec
    """How each worker's environment reaches the gateway."""
    actors: list[Any]
    """The worker actors, started while the gateway loaded."""
    tool_specs: list[dict[str, Any]]
    """The tools the environments offer, as the model sees them."""
    degraded_tools: dict[str, str]
    """The offered tools the gateway serves degraded, name → reason (for the summary)."""


@contextlib.contextmanager
def serving(cfg: RunConfig, prepared: Prepared, timeline: Timeline) -> Iterator[Served]:
    """The run's gateway, Ray and workers, up for the `with`; taken down after it (a sweep keeps its gateway)."""
    n_tasks = len(prepared.data.questions) * cfg.repeats
    with gateway_for_run(cfg.gateway_launch, prepared.data.corpus_path) as gateway, ray_session(cfg.ray):
        timeline.mark("ray up")
        actors = start_actors(cfg.worker_pool, min(cfg.workers, n_tasks))
        url = gateway.wait_ready()
        timeline.mark("gateway ready")
        logger.info("Gateway ready at %s", url)
        run_id = uuid.uuid4().hex
        gateway.take_run(run_id, cfg.output_dir)
        env_spec = env_spec_for(cfg.gateway, cfg.gateway_config_path, cfg.system_prompt, url, run_id=run_id)
        tool_specs, degraded_tools = offered_tools(env_spec)
        check_agent_tools(prepared.agent, tool_specs)
        yield Served(gateway, env_spec, actors, tool_specs, degraded_tools)


def env_spec_for(gateway: GatewayConfig, gateway_file: Path, system_prompt: str | None, url: str,
                 run_id: str) -> EnvSpec:
    """How each worker's environment reaches the gateway at `url`: the run's gateway settings, its gateway file and
    system prompt."""
    return EnvSpec(
        url=url,
        gateway_config_path=str(gateway_file),
        system_prompt=system_prompt,
        call_timeout_s=gateway.call_timeout_s,
        auth_token=resolve_token(gateway.auth_token),
        reconnect_timeout_s=gateway.reconnect_timeout_s,
        run_id=run_id,
    )


def offered_tools(env_spec: EnvSpec) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The tool schemas a worker's environment will offer (for the run's fingerprint), and which of those tools
    the gateway serves degraded, name → reason (for the summary)."""

    async def probe() -> tuple[list[dict[str, Any]], dict[str, str]]:
        async with env_spec.build("driver") as env:
            return list(env.tool_specs), env.degraded_tools

    return asyncio.run(probe())
