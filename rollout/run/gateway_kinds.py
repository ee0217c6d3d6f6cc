"""The gateway a run uses, of three kinds: a process of its own (`GatewayProcess`; within a sweep, the one its jobs
share), replicas on Ray Serve (`ServeGateway`, `gateway.replicas > 1`) or one already running (`gateway.url`); and
the command line a launched one starts with."""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import ray.util

from rollout.gateway_file import load_gateway_file
from rollout.logs import verbosity_flags
from rollout.run.config import GatewayConfig, GatewayLaunch
from rollout.run.gateway_process import GatewayProcess
from rollout.run.ray_session import ray_session
from rollout.run.scheduler import Gateway
from rollout.run.sweep_gateway import gateway_process, kept_for_the_sweep, stop_the_sweeps_gateway
from rollout.wire import resolve_token, warn_if_unguarded

if TYPE_CHECKING:
    from rollout.run.gateway_serve import ServeGateway

logger = logging.getLogger(__name__)


def gateway_args(launch: GatewayLaunch, corpus_path: Path, retriever_config: Path) -> list[str]:
    """The gateway's command line; paths are absolute, as Serve replicas do not start in the run's directory.

    The run's `llm:` block goes inline when the gateway file's step tools ask an LLM (`RunConfig.step_llm`): it
    names the key's environment variable, never the key."""
    gateway, extra = launch.gateway, []
    if launch.tokenizer:
        extra += ["--tokenizer", str(launch.tokenizer)]
    if not gateway.offline_steps:
        extra.append("--no-offline-steps")
    if launch.step_llm is not None:
        extra += ["--llm-config", json.dumps(launch.step_llm)]
    if launch.sources_root is not None:
        extra += ["--sources-root", str(launch.sources_root)]
    return [
        "--config", str(launch.gateway_file.resolve()),
        "--corpus", str(corpus_path.resolve()),
        "--cache-dir", str(launch.cache_dir.resolve()),
        "--output-dir", str(launch.output_dir.resolve()),
        "--no-report",  # the run writes the report from its trajectory once the gateway is stopped
        "--retriever-config", str(retriever_config),
        "--default-top-k", str(gateway.default_top_k),
        "--max-top-k", str(gateway.max_top_k),
        "--default-max-docs", str(gateway.default_max_docs),
        "--transport", gateway.transport,
        # The token reaches the child through GatewayProcess's environment, never its command line.
        "--tool-timeout-s", str(gateway.tool_timeout_s or gateway.call_timeout_s),
        "--threads-per-group", str(gateway.threads_per_group),
        *verbosity_flags(launch.verbose),
        *extra,
    ]


class RunGateway(Protocol):
    """What a run does with its gateway, whichever of the three kinds `gateway_for_run` gives."""

    def wait_ready(self) -> str:
        """The MCP URL, once the gateway answers."""

    def take_run(self, run_id: str, output_dir: Path) -> None:
        """Record the calls carrying `run_id` in `output_dir`'s ledger (a launched process, whichever run started it:
        a sweep's jobs share one). A Serve gateway and a running one keep their stats where they were started."""

    def watched(self) -> Gateway | None:
        """What the scheduler watches and restarts when it dies (a launched process); None for the others."""

    def report_when_stopped(self, out: Path) -> Callable[[], None]:
        """Start what ends the gateway's part of the run; the callable, called once the run's `with` is left, writes
        the tool report (`tool_stats/report.json`) when the gateway's ledger is complete."""


@dataclass(frozen=True, slots=True)
class RunningGateway:
    """A gateway someone else started: nothing to wait for, nothing to stop, its stats where it was started."""

    url: str

    def wait_ready(self) -> str:
        return self.url

    def take_run(self, run_id: str, output_dir: Path) -> None:
        pass

    def watched(self) -> Gateway | None:
        return None

    def report_when_stopped(self, out: Path) -> Callable[[], None]:
        return lambda: None


@dataclass(frozen=True, slots=True)
class LaunchedGateway:
    """The gateway process the run launched, or the one its sweep shares (`rollout.run.sweep_gateway`)."""

    process: GatewayProcess

    def wait_ready(self) -> str:
        return self.process.wait_ready()

    def take_run(self, run_id: str, output_dir: Path) -> None:
        self.process.register_run(run_id, output_dir)

    def watched(self) -> Gateway | None:
        return self.process

    def report_when_stopped(self, out: Path) -> Callable[[], None]:
        """Stop the process (unless the sweep keeps it) and write the report on a thread of their own, so that both
        overlap Ray's shutdown (about a second each). Once the gateway has stopped, a call still running when its
        task timed out is in the ledger too. A sweep's gateway serves on for its next jobs: the report is written at
        once; the ledger holds every call of the finished tasks (the gateway writes a call's line before it
        answers), and only a call still running after its task timed out may land later, counted by a later
        `rollout report tool-stats`."""

        def stop_and_report() -> None:
            if not kept_for_the_sweep(self.process):
                self.process.stop()
            write_tool_report(out)

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool-report")
        done = pool.submit(stop_and_report)
        pool.shutdown(wait=False)  # the caller waits for `done`
        return done.result  # the report's own error, if any, is raised there


@dataclass(frozen=True, slots=True)
class ServedGateway:
    """Gateway replicas on Ray Serve (`rollout.run.gateway_serve`), taken down when the run's `with` is left."""

    serve: ServeGateway

    def wait_ready(self) -> str:
        return self.serve.wait_ready()

    def take_run(self, run_id: str, output_dir: Path) -> None:
        pass

    def watched(self) -> Gateway | None:
        return None  # Serve restarts a replica that dies

    def report_when_stopped(self, out: Path) -> Callable[[], None]:
        return lambda: write_tool_report(out)  # the replicas closed their ledgers as Serve took them down


def write_tool_report(out: Path) -> None:
    """`rollout.report.write_tool_report`, imported when used: the report needs pandas, which the summary does not."""
    from rollout.report.tool_calls.report import write_tool_report as write

    write(out)


@contextlib.contextmanager
def gateway_for_run(launch: GatewayLaunch, corpus_path: Path) -> Iterator[RunGateway]:
    """The configured gateway, or one launched for this run (stopped after it, even on failure), or within a sweep
    the one its jobs share (`rollout.run.sweep_gateway`, stopped when the sweep ends).

    A gateway the run launches plans its gateway file itself: an unknown tool group makes it exit with its error
    (exit code 2, see `GatewayProcess.wait_ready`) while Ray starts, and the run never imports the tool modules
    before Ray (the MCP server's, half a second). The file of a running gateway or a Serve one is planned here.

    One replica is a child process, started before Ray so it loads while Ray starts; more are a Ray
    Serve application, deployed once Ray is up (this enters `ray_session`, and the run's own use of
    it then finds Ray running)."""
    if launch.gateway.url:
        _plan_gateway_file(launch.gateway_file)
        logger.info("Using running gateway %s; its tool stats are written where it was started", launch.gateway.url)
        stop_the_sweeps_gateway("this job uses a running gateway")
        yield RunningGateway(launch.gateway.url)
        return
    token = launch.gateway.auth_token
    host = gateway_host(launch.gateway, launch.ray.address)
    warn_if_unguarded(logger, "The run's gateway", host, resolve_token(token), "call its tools")
    if launch.gateway.replicas > 1:
        # Imported here: it loads the gateway's own modules, which a one-process run never needs.
        from rollout.run.gateway_serve import ServeGateway

        _plan_gateway_file(launch.gateway_file)  # refused here, not by every replica
        stop_the_sweeps_gateway("this job serves its gateway on Ray Serve")
        with tempfile.TemporaryDirectory(prefix="rollout-run-") as tmp:
            retriever_config = Path(tmp) / "retriever.json"
            retriever_config.write_text(json.dumps(launch.retriever.to_dict()), encoding="utf-8")
            with ray_session(launch.ray), ServeGateway(
                gateway_args(launch, corpus_path, retriever_config), launch.retriever.to_dict(), host=host,
                replicas=launch.gateway.replicas, replica_cpus=launch.gateway.replica_cpus,
                autoscaling=launch.gateway.autoscaling, ready_timeout_s=launch.gateway.ready_timeout_s,
                auth_token=token,
            ) as served:
                yield ServedGateway(served)
        return
    with gateway_process(lambda retriever_config: gateway_args(launch, corpus_path, retriever_config),
                         launch.retriever.to_dict(), host=host, auth_token=token,
                         ready_timeout_s=launch.gateway.ready_timeout_s) as gw:
        yield LaunchedGateway(gw)


def _plan_gateway_file(path: Path) -> None:
    """Plan the run's gateway file against the shipped tools: an unknown tool group is a `ConfigError`."""
    from rollout.gateway.plan import plan_gateway  # imports the tool modules, hence the MCP server

    plan_gateway(load_gateway_file(path))


def gateway_host(gateway: GatewayConfig, ray_address: str | None) -> str:
    """Where a launched gateway listens: `gateway.host`, else this node's IP in a cluster (`ray_address`: workers on
    other nodes connect to it), else loopback."""
    if gateway.host:
        return gateway.host
    return ray.util.get_node_ip_address() if ray_address else "127.0.0.1"
