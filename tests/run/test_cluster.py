"""A run that joins a Ray cluster: where its gateway listens and what its workers get from the driver's environment."""

from __future__ import annotations

import dataclasses
import logging

import ray.util

from rollout.run.config import RunConfig, compose_run_config
from rollout.run.gateway_kinds import gateway_host
from rollout.run.ray_session import worker_env_vars
from rollout.wire import is_loopback, warn_if_unguarded


def host_of(cfg: RunConfig) -> str:
    return gateway_host(cfg.gateway, cfg.ray_address)


def test_a_local_run_keeps_its_gateway_on_loopback():
    assert host_of(compose_run_config()) == "127.0.0.1"


def test_a_cluster_run_binds_the_node_address_unless_told_otherwise(monkeypatch):
    cfg = compose_run_config("ray.address=auto")
    assert host_of(cfg) == ray.util.get_node_ip_address()
    assert host_of(compose_run_config("ray.address=auto", "gateway.host=0.0.0.0")) == "0.0.0.0"
    # On a node whose address other nodes reach, that address is where the gateway listens, off loopback; a local
    # run on the same node stays on loopback, and gateway.host still wins.
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda *args, **kwargs: "10.1.2.3")
    assert host_of(cfg) == "10.1.2.3" and not is_loopback(host_of(cfg))
    assert host_of(compose_run_config()) == "127.0.0.1"
    assert host_of(compose_run_config("ray.address=auto", "gateway.host=127.0.0.1")) == "127.0.0.1"


def test_host_is_not_part_of_the_run_identity():
    assert compose_run_config("gateway.host=10.0.0.5").overrides == ()


def test_the_llm_key_reaches_workers_by_name_and_nothing_else(monkeypatch):
    cfg = compose_run_config("agent=openai", "llm.model=m", "llm.api_key_env=MY_KEY")
    monkeypatch.delenv("MY_KEY", raising=False)
    assert worker_env_vars(cfg.ray) == {}
    monkeypatch.setenv("MY_KEY", "sk-test")
    monkeypatch.setenv("ROLLOUT_GATEWAY_TOKEN", "secret")  # travels in EnvSpec, not the runtime environment
    assert worker_env_vars(cfg.ray) == {"MY_KEY": "sk-test"}
    assert worker_env_vars(compose_run_config().ray) == {}  # the offline agent needs no key


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.1.2.3") and not is_loopback("0.0.0.0") and not is_loopback("example.org")


def test_a_server_off_loopback_without_a_token_is_warned_of_once_by_whoever_starts_it(caplog):
    # The gateway command, the OpenEnv server and a run's gateway say the same, each through its own logger.
    said = logging.getLogger("some.server")
    with caplog.at_level(logging.WARNING, logger="some.server"):
        warn_if_unguarded(said, "The environment", "127.0.0.1", None, "play episodes")
        warn_if_unguarded(said, "The environment", "0.0.0.0", "secret", "play episodes")
        assert caplog.records == []
        warn_if_unguarded(said, "The environment", "0.0.0.0", None, "play episodes")
    [record] = caplog.records
    assert record.name == "some.server" and record.getMessage() == (
        "The environment binds 0.0.0.0 without a token: anyone who can reach that address can play episodes. "
        "Export ROLLOUT_GATEWAY_TOKEN=<secret> before starting it to require one.")


def test_a_gateway_on_the_network_without_a_token_is_warned_about(monkeypatch, caplog, tmp_path):
    from rollout.run import gateway_kinds, sweep_gateway

    launched = {}

    class FakeProcess:  # stands in for the child process only: what the driver hands it is what is checked
        def __init__(self, args, *, host, ready_timeout_s, auth_token):
            launched.update(host=host, token=auth_token)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(sweep_gateway, "GatewayProcess", FakeProcess)
    monkeypatch.delenv("ROLLOUT_GATEWAY_TOKEN", raising=False)
    cfg = compose_run_config(f"output_dir={tmp_path}")
    cfg = dataclasses.replace(cfg, gateway=dataclasses.replace(cfg.gateway, host="10.9.8.7"))
    with caplog.at_level(logging.WARNING, logger="rollout.run.gateway_kinds"), \
            gateway_kinds.gateway_for_run(cfg.gateway_launch, tmp_path / "c.jsonl"):
        pass
    assert launched["host"] == "10.9.8.7"
    assert "without a token" in caplog.text and "ROLLOUT_GATEWAY_TOKEN" in caplog.text
