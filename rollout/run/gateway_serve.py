"""Deploy the gateway on Ray Serve for a run (`gateway.replicas > 1`), and take it down after.

The same contract as `GatewayProcess`: a context manager whose `wait_ready()` gives the MCP URL.
Before the deployment one Ray task fills the index cache, so the replicas only load (memory-map)
what it built. Serve routes each request to any replica (the app is stateless streamable HTTP,
see `rollout.gateway.serve_replica`) and restarts a replica that dies; the run neither watches
nor restarts them itself.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import ray

from rollout.errors import ConfigError, GatewayError
from rollout.gateway.serve_replica import (
    check_replicable,
    gateway_application,
    prebuild_indexes,
    served_dense_folder,
)
from rollout.logs import adopt_serve_logger
from rollout.run.gateway_process import health_url
from rollout.wire import auth_headers, resolve_token

logger = logging.getLogger(__name__)

SERVE_CONTROLLER = "SERVE_CONTROLLER_ACTOR"
"""Name of Serve's controller actor (in namespace "serve"); it exists while Serve runs on the cluster."""
_POLL_S = 0.25
SERVE_LOGGING = {"log_level": "WARNING", "enable_access_log": False}
"""Serve logs every request at INFO; per-call detail is in the ledgers already."""


class ServeGateway:
    """`replicas` gateway replicas serving `args` (the gateway's command line) at one URL on `host`."""

    def __init__(self, args: list[str], retrieval: dict[str, Any], *, host: str = "127.0.0.1", replicas: int = 2,
                 replica_cpus: float = 1.0, autoscaling: dict[str, Any] | None = None,
                 ready_timeout_s: float = 900.0, auth_token: str | None = None):
        self.args = [*args, "--host", host]  # the replicas' Host checks follow the address Serve listens on
        self.retrieval = dict(retrieval)
        """The run's `retriever` section, handed to the index task and each replica with the call."""
        self.host = host
        self.replicas = replicas
        self.replica_cpus = replica_cpus
        self.autoscaling = dict(autoscaling) if autoscaling else None
        self.ready_timeout_s = ready_timeout_s
        self.auth_token = resolve_token(auth_token)
        self.app_name = f"rollout-gateway-{uuid.uuid4().hex[:8]}"
        """One application per run, under its own route, so runs sharing a cluster's Serve do not collide."""
        self.url: str | None = None
        self._started_serve = False
        self._deployed = False
        self._shard_apps: list[str] = []
        """The dense shard applications this run deployed (`retriever.dense.serve=true`), deleted at its end."""

    def __enter__(self) -> ServeGateway:
        check_replicable(self.args)
        self.launch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def launch(self) -> None:
        """Build the indexes once, start Serve if it is not running, and deploy; `wait_ready` waits for it."""
        from ray import serve

        adopt_serve_logger()
        if not ray.is_initialized():
            raise GatewayError("a Ray Serve gateway needs Ray: start it first (the run does)")
        t0 = time.perf_counter()
        seconds = ray.get(ray.remote(num_cpus=0)(prebuild_indexes).remote(self.args, self.retrieval))
        logger.info("Indexes ready in the cache for the replicas in %.1f s (%.1f s in the task)",
                    time.perf_counter() - t0, seconds)
        self._started_serve = not _serve_running()
        serve.start(proxy_location="HeadOnly", http_options={"host": self.host, "port": _free_port(self.host)},
                    logging_config=SERVE_LOGGING)
        self._deploy_dense_shards()
        application = gateway_application(self.args, self.retrieval, replicas=self.replicas,
                                          replica_cpus=self.replica_cpus, autoscaling=self.autoscaling)
        serve._run(application, name=self.app_name, route_prefix=f"/{self.app_name}", _blocking=False,
                   logging_config=SERVE_LOGGING)
        self._deployed = True
        logger.info("Deploying %d gateway replicas on Ray Serve as %s", self.replicas, self.app_name)

    def _deploy_dense_shards(self) -> None:
        """With `retriever.dense.serve=true`: each dense shard its own Serve application, running before the gateway
        replicas load (they search through them). Applications another run deployed first are used, not owned."""
        from rollout.retrieval.dense_serve import deploy_shards
        from rollout.retrieval.params import RetrievalParams

        folder = ray.get(ray.remote(num_cpus=0)(served_dense_folder).remote(self.args, self.retrieval))
        if folder is None:
            return
        from ray import serve

        running = set(serve.status().applications)
        names = deploy_shards(Path(folder), RetrievalParams.from_dict(self.retrieval).dense)
        self._shard_apps = [name for name in names if name not in running]
        logger.debug("dense shard applications %s (deployed here: %s)", names, self._shard_apps)

    def wait_ready(self) -> str:
        """The MCP URL once Serve reports the application running and the gateway answers its health check."""
        if self.url is not None:
            return self.url
        deadline = time.monotonic() + self.ready_timeout_s
        _wait_running(self.app_name, deadline)
        url = f"{_proxy_root(self.host)}/{self.app_name}/mcp"
        _wait_healthy(url, self.auth_token, deadline)
        self.url = url
        return url

    def stop(self) -> None:
        """Delete the application (each replica closes its ledger), and Serve too when this run started it."""
        if not ray.is_initialized():
            return
        from ray import serve

        from rollout.retrieval.dense_serve import delete_applications

        # The cluster may be going away under us: a warning then, and the ledgers are complete line by line.
        delete_applications(([self.app_name] if self._deployed else []) + self._shard_apps)
        self._deployed, self._shard_apps = False, []
        if self._started_serve:
            self._started_serve = False
            serve.shutdown()
            _wait_serve_actors_gone()


def _wait_serve_actors_gone(timeout_s: float = 30.0) -> None:
    """Wait until Serve's named actors (controller, proxies) have left the cluster: `serve.shutdown()` returns while
    they still go, and a run that starts Serve on the same cluster right after would meet a proxy of the old name
    being killed ("cancelled before it started")."""
    deadline = time.monotonic() + timeout_s
    while any(actor["namespace"] == "serve" for actor in ray.util.list_named_actors(all_namespaces=True)):
        if time.monotonic() > deadline:
            logger.warning("Ray Serve's actors were still stopping %g s after serve.shutdown()", timeout_s)
            return
        time.sleep(_POLL_S)


def _serve_running() -> bool:
    try:
        ray.get_actor(SERVE_CONTROLLER, namespace="serve")
    except ValueError:
        return False
    return True


def _free_port(host: str) -> int:
    """A port free on `host` now, for Serve's HTTP proxy (used only when this run starts Serve)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _proxy_root(host: str) -> str:
    """http://HOST:PORT of Serve's HTTP proxy, as configured (an already running Serve keeps its own options)."""
    from ray.serve.context import _get_global_client

    config = _get_global_client().http_config
    bound = host if config.host in ("0.0.0.0", "::") else config.host
    return f"http://{bound}:{config.port}" if ":" not in bound else f"http://[{bound}]:{config.port}"


def _wait_running(app_name: str, deadline: float) -> None:
    from ray import serve

    while True:
        app = serve.status().applications.get(app_name)
        status = str(app.status).rsplit(".", 1)[-1] if app is not None else "NOT_STARTED"
        if status == "RUNNING":
            return
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            details = "; ".join(f"{name}: {d.message}" for name, d in app.deployments.items() if d.message)
            raise ConfigError(f"the gateway replicas did not start ({status}): {app.message or details}")
        if time.monotonic() > deadline:
            raise GatewayError(f"the gateway replicas were not running after the ready timeout ({status}); "
                               "raise gateway.ready_timeout_s, or check that the cluster has "
                               "gateway.replicas x gateway.replica_cpus CPUs free")
        time.sleep(_POLL_S)


def _wait_healthy(url: str, token: str | None, deadline: float) -> None:
    health = health_url(url)
    while True:
        try:
            if httpx.get(health, headers=auth_headers(token), timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise GatewayError(f"the gateway replicas run but {health} does not answer")
        time.sleep(_POLL_S)
