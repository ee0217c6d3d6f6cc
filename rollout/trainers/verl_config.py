"""verl's tool config for a gateway: one verl tool per tool the gateway offers, each a `GatewayTool` that calls it.

    rollout gateway --config conf/gateways/rag_hybrid.json --port 8080 --verl-tools verl_hybrid.yaml

verl (0.9.1) reads the file named by `actor_rollout_ref.rollout.multi_turn.tool_config_path` with
`verl.tools.tool_registry.initialize_tools_from_config`: a `tools:` list whose entries name a `BaseTool` subclass
(`class_name`), its `config` (`type: native`, the one type verl 0.9.1 has, and what `GatewayToolConfig` reads) and
its `tool_schema`, the function spec the policy is shown. The specs are the gateway's own: its tools are listed
from the gateway built in-process with the options it will serve with (no corpus or index is loaded; the schemas
state only the options' defaults, e.g. `--default-top-k`), kept and converted by the environment the evaluation's
agents use (`HttpMCPRagEnv.offered`, `rollout.mcp_client.schema.mcp_tool_to_function`), so the policy in training reads the tool
list the evaluated agent reads. This module needs no verl: the tool itself is `rollout.trainers.verl`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envs.http_mcp_rag_env import HttpMCPRagEnv
from rollout.errors import ConfigError
from rollout.gateway_file import load_gateway_file
from rollout.wire import TOKEN_ENV, is_http_url

if TYPE_CHECKING:  # the gateway's side: a trainer's tool does not import it
    from rollout.gateway.knowledge import KnowledgeBase

TOOL_CLASS = "rollout.trainers.verl.GatewayTool"
"""The `class_name` of every tool the written config names."""
TOOL_TYPE = "native"
"""verl's tool type for a `BaseTool` subclass (verl 0.9.1 removed its `mcp` type)."""
CALL_TIMEOUT_S, RECONNECT_TIMEOUT_S = 60.0, 120.0
"""A tool's timeouts unless its config sets them (those of an evaluation's environment)."""


@dataclass(frozen=True, slots=True)
class GatewayToolConfig:
    """A `GatewayTool`'s `config:` in verl's tool config: which gateway serves the tool and how to reach it."""

    url: str
    """The gateway's MCP URL (`http://HOST:PORT/mcp`, or `/sse`)."""
    gateway_file: str | None = None
    """The experiment's gateway file (an absolute path: verl runs from its own folder)."""
    experiment: tuple[str, ...] = ()
    """Instead of `gateway_file`: the Hydra overrides of the experiment (`mode=dense ...`), whose gateway file it is."""
    token_env: str = TOKEN_ENV
    """The environment variable holding the gateway's bearer token, read when a tool instance is created (the
    token itself never goes in the file); unset or empty: no token is sent."""
    call_timeout_s: float = CALL_TIMEOUT_S
    """A call with no answer after this long is a `timeout` result the policy reads."""
    reconnect_timeout_s: float = RECONNECT_TIMEOUT_S
    """How long a call waits for a broken session to the gateway to reopen."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> GatewayToolConfig:
        """Check a tool's `config:` mapping (verl's `type` key aside); a bad one is a `ConfigError` naming the fix."""
        given = {k: v for k, v in config.items() if k != "type"}
        known = [f.name for f in fields(cls)]
        if unknown := sorted(set(given) - set(known)):
            raise ConfigError(f"verl tool config: unknown key {', '.join(unknown)}; a GatewayTool's config takes "
                              f"type, {', '.join(known)}")
        if not is_http_url(given.get("url")):
            raise ConfigError(f"verl tool config: url {given.get('url')!r} is not the gateway's MCP URL, e.g. "
                              "http://127.0.0.1:8080/mcp (rollout gateway ... --verl-tools FILE writes it)")
        experiment = given.get("experiment") or ()
        if isinstance(experiment, str) or not all(isinstance(o, str) for o in experiment):
            raise ConfigError(f"verl tool config: experiment {experiment!r} must be a list of Hydra overrides, e.g. "
                              "[mode=dense, dataset=nq]")
        if bool(given.get("gateway_file")) == bool(experiment):
            raise ConfigError("verl tool config: give the gateway file (gateway_file: PATH) or the experiment "
                              "(experiment: [mode=dense, ...]), one of the two")
        try:
            return cls(url=given["url"], gateway_file=given.get("gateway_file") or None, experiment=tuple(experiment),
                       token_env=str(given.get("token_env") or TOKEN_ENV),
                       call_timeout_s=float(given.get("call_timeout_s", CALL_TIMEOUT_S)),
                       reconnect_timeout_s=float(given.get("reconnect_timeout_s", RECONNECT_TIMEOUT_S)))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"verl tool config: a timeout is not a number of seconds ({e})") from None

    def resolved_gateway_file(self) -> Path:
        """The gateway file: `gateway_file`, or the one the experiment's overrides name (composed as a run does)."""
        if self.gateway_file is not None:
            return Path(self.gateway_file)
        from rollout.trainers.experiment import (
            TrainingExperiment,  # Hydra's compose: only when the file is not named
        )

        return TrainingExperiment.compose(self.experiment).gateway_file

    def to_config(self) -> dict[str, Any]:
        """The `config:` mapping verl hands the tool."""
        config: dict[str, Any] = {"type": TOOL_TYPE, "url": self.url}
        if self.gateway_file is not None:
            config["gateway_file"] = self.gateway_file
        if self.experiment:
            config["experiment"] = list(self.experiment)
        return {**config, "token_env": self.token_env, "call_timeout_s": self.call_timeout_s,
                "reconnect_timeout_s": self.reconnect_timeout_s}


def verl_tool_schema(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A function spec as verl's `OpenAIFunctionToolSchema` takes it: its `parameters` always have `properties` and
    `required` (MCP leaves `required` out when no parameter is required, verl before 0.9 refused that)."""
    schema = copy.deepcopy(dict(spec))
    parameters = schema["function"].setdefault("parameters", {"type": "object"})
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    return schema


async def offered_tool_specs(gateway_file: Path, url: str, kb: KnowledgeBase) -> list[dict[str, Any]]:
    """The function specs an agent at `url` is offered by a gateway serving `gateway_file` over `kb`, listed from the
    gateway built in-process (upstream tool servers it proxies are reached, as when it serves)."""
    # The gateway's side, imported here: a trainer's tool only needs the config above.
    from mcp.client.client import Client

    from rollout.gateway.server import build_gateway

    gateway = load_gateway_file(gateway_file)
    if gateway.dynamic_toolsets:
        raise ConfigError(f"gateway file {gateway_file} activates tool sets per task (dynamic_toolsets), and verl "
                          "shows the policy one fixed tool list: train with a gateway file without dynamic_toolsets")
    server = build_gateway(gateway, kb)
    async with server.running(), Client(server) as client:
        listed = (await client.list_tools()).tools
    # The environment a GatewayTool's session opens keeps what it offers an agent: the gateway file's RAG groups.
    _, specs = HttpMCPRagEnv(url, gateway_file).offered(listed)
    return specs


def verl_tool_config(specs: Sequence[Mapping[str, Any]], tool: GatewayToolConfig) -> dict[str, Any]:
    """verl's tool config: one `GatewayTool` entry per spec, each with `tool`'s config."""
    return {"tools": [{"class_name": TOOL_CLASS, "config": tool.to_config(), "tool_schema": verl_tool_schema(spec)}
                      for spec in specs]}


def write_verl_tool_config(path: Path, gateway_file: Path, url: str, kb: KnowledgeBase) -> list[str]:
    """Write verl's tool config for the gateway serving `gateway_file` at `url`; the tool names, in its order. A
    gateway file that offers no tool is a `ConfigError` (train without a tool config instead)."""
    gateway_file = Path(gateway_file).resolve()
    specs = asyncio.run(offered_tool_specs(gateway_file, url, kb))
    if not specs:
        raise ConfigError(f"gateway file {gateway_file} offers no tool: train without a tool config "
                          "(leave actor_rollout_ref.rollout.multi_turn.tool_config_path unset)")
    config = verl_tool_config(specs, GatewayToolConfig(url=url, gateway_file=str(gateway_file)))
    header = (f"# verl tool config for the rollout gateway at {url} serving {gateway_file}\n"
              f"# (rollout gateway --verl-tools); the token is read from ${TOKEN_ENV} where verl runs.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100),
                    encoding="utf-8")
    return [spec["function"]["name"] for spec in specs]


class _Dumper(yaml.SafeDumper):
    """YAML with multi-line strings (tool descriptions) as `|` blocks, which read as the text they are."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _represent_str)
