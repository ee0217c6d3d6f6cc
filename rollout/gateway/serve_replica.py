"""The gateway as a Ray Serve deployment: N replicas of the same app behind one HTTP URL.

Each replica takes the command line `python -m rollout.gateway` takes, loads the knowledge base
from the index cache (memory-mapped; `prebuild_indexes` filled the cache once before the
deployment, so replicas never build), and serves the gateway's ASGI app in stateless streamable
HTTP: no request depends on an earlier one reaching the same replica, so Serve may route each to
any replica. Each replica appends to its own ledger (`realtime_calls.<replica>.jsonl`), and the
report reads them together.

`ray.serve` is imported only here, and only when a deployment is made: the single-process gateway
never loads it.
"""

from __future__ import annotations

import logging
from typing import Any

from rollout.errors import ConfigError
from rollout.gateway.http_app import gateway_app
from rollout.gateway.launch import build_parser, corpus_of, load_knowledge_base, open_collector, option_error
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway
from rollout.gateway_file import VISUALIZE_GROUP, load_gateway_file
from rollout.logs import configure_logging, verbosity
from rollout.retrieval.params import RetrievalParams
from rollout.run_folder import replica_ledger_name
from rollout.wire import resolve_token

logger = logging.getLogger("rollout.gateway")

DEPLOYMENT_NAME = "RolloutGateway"


def check_replicable(argv: list[str]) -> None:
    """Refuse what replicas cannot serve: a `ConfigError` naming the setting and the fix."""
    args = build_parser().parse_args(argv)
    if (problem := option_error(args)) is not None:
        raise ConfigError(problem)
    if args.transport != "streamable-http":
        raise ConfigError(f"gateway.replicas > 1 serves streamable-http only; set gateway.transport=streamable-http "
                          f"(got {args.transport}: an SSE stream must come back to the replica that opened it)")
    gateway = load_gateway_file(args.config)
    if plan_gateway(gateway).dynamic:
        raise ConfigError(f"{args.config} lets tasks load tool sets, which each replica would track apart; "
                          "use a static gateway file with gateway.replicas > 1, or gateway.replicas=1")
    if VISUALIZE_GROUP in gateway.tool_groups():  # the one group with per-task state
        raise ConfigError(f"{args.config} serves {VISUALIZE_GROUP}, which shows each task's last results as one "
                          "replica remembers them; drop it from the gateway file, or use gateway.replicas=1")


def prebuild_indexes(argv: list[str], retrieval: dict[str, Any]) -> float:
    """Build (or find) in the cache every index the gateway file needs; the seconds it took.

    Run once before the deployment, so the replicas starting together each load the same files
    instead of each building them. `retrieval` is the run's `retriever` section: it travels with the
    call, so no node needs the driver's copy of the file.
    """
    import time
    from dataclasses import replace

    from rollout.data import open_corpus
    from rollout.paths import default_cache_dir
    from rollout.retrieval import load_or_build_indexes

    started = time.perf_counter()
    args = build_parser().parse_args(argv)
    requires = plan_gateway(load_gateway_file(args.config)).requires
    if requires:
        cache_dir = args.cache_dir or default_cache_dir()
        params = RetrievalParams.from_dict(retrieval)
        # Built and mapped here; dense shards for Serve are deployed after this (`served_dense_folder`).
        local = replace(params, dense=replace(params.dense, serve=False))
        load_or_build_indexes(open_corpus(corpus_of(args, cache_dir), cache_dir), cache_dir, which=requires,
                              params=local)
    return time.perf_counter() - started


def served_dense_folder(argv: list[str], retrieval: dict[str, Any]) -> str | None:
    """With `retriever.dense.serve=true` and a gateway file that searches the dense index: the cache entry of its
    shards (built or found, as `prebuild_indexes` does), for the run to deploy; else None. Run as a Ray task."""
    from dataclasses import replace

    from rollout.data import open_corpus
    from rollout.paths import default_cache_dir
    from rollout.retrieval import load_or_build_indexes

    params = RetrievalParams.from_dict(retrieval)
    args = build_parser().parse_args(argv)
    if not params.dense.serve or not {"dense", "hybrid"} & set(plan_gateway(load_gateway_file(args.config)).requires):
        return None
    cache_dir = args.cache_dir or default_cache_dir()
    local = replace(params, dense=replace(params.dense, serve=False))  # the entry, mapped here, not served
    dense = load_or_build_indexes(open_corpus(corpus_of(args, cache_dir), cache_dir), cache_dir, which=["dense"],
                                  params=local)["dense"]
    dense.close()
    return str(dense.folder)


class GatewayReplica:
    """One replica: the gateway `argv` describes, recording its calls in a ledger of its own."""

    def __init__(self, argv: list[str], retrieval: dict[str, Any]) -> None:
        from ray import serve

        args = build_parser().parse_args(argv)
        configure_logging(verbosity(args))  # a Ray worker of Serve's: its lines reach the run's log in the one format
        self.replica = serve.get_replica_context().replica_id.unique_id
        gateway = load_gateway_file(args.config)
        kb = load_knowledge_base(args, plan_gateway(gateway).requires, RetrievalParams.from_dict(retrieval))
        self.collector = open_collector(args, replica_ledger_name(self.replica))
        # No POST /runs: a registration would reach one replica of many. A Serve gateway serves one run, whose
        # folder is its --output-dir (a sweep never shares it, `rollout.run.sweep_gateway`).
        self.server = build_gateway(gateway, kb, self.collector, tool_timeout_s=args.tool_timeout_s,
                                    threads_per_group=args.threads_per_group, serve_runs=False)
        self.asgi_app = gateway_app(self.server, transport=args.transport, auth_token=resolve_token(args.auth_token),
                                    host=args.host, stateless=True)
        logger.info("Gateway replica %s ready", self.replica)

    def __serve_build_asgi_app__(self) -> Any:
        return self.asgi_app

    def __del__(self) -> None:
        collector = getattr(self, "collector", None)
        if collector is not None:
            collector.close()


def gateway_application(argv: list[str], retrieval: dict[str, Any], *, replicas: int, replica_cpus: float,
                        autoscaling: dict[str, Any] | None = None) -> Any:
    """The Serve application (`Deployment.bind(...)`) of `replicas` gateway replicas serving `argv`'s gateway.

    With `autoscaling` (Serve's `autoscaling_config`: min_replicas, max_replicas, target_ongoing_requests, ...)
    Serve sizes the deployment itself and `replicas` is where it starts.
    """
    from ray import serve

    from rollout.retrieval.dense_serve import SHUTDOWN_WAIT_LOOP_S

    options: dict[str, Any] = {"ray_actor_options": {"num_cpus": replica_cpus}, "name": DEPLOYMENT_NAME,
                               "graceful_shutdown_wait_loop_s": SHUTDOWN_WAIT_LOOP_S}
    if autoscaling:
        options["autoscaling_config"] = {"initial_replicas": replicas, **autoscaling}
    else:
        options["num_replicas"] = replicas
    deployment = serve.deployment(serve.ingress()(GatewayReplica)).options(**options)
    return deployment.bind(list(argv), dict(retrieval))
