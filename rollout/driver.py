"""The run: data → gateway → Ray workers → trajectory → scores and tool stats."""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from omegaconf import OmegaConf

from rollout.config import RunConfig
from rollout.data.records import Question
from rollout.dataset import prepare_data
from rollout.gateway.auth import resolve_token
from rollout.gateway.config import load_gateway_file
from rollout.gateway.process import GatewayProcess
from rollout.gateway.server import plan_gateway
from rollout.gateway.stats import CALLS_FILE
from rollout.records import TaskResult
from rollout.report import write_tool_report
from rollout.report.calls import STATS_DIR
from rollout.scoring import TRAJECTORY_FILE, print_summary, summarize, write_summary
from rollout.worker import RolloutWorkerActor

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """Where a run wrote its results, and its evaluation summary."""

    output_dir: Path
    summary: dict[str, Any]


def gateway_args(cfg: RunConfig, corpus_path: Path, retriever_config: Path) -> list[str]:
    return [
        "--config", str(cfg.gateway_config_path),
        "--corpus", str(corpus_path),
        "--cache-dir", str(cfg.cache_dir),
        "--output-dir", str(cfg.output_dir),
        "--retriever-config", str(retriever_config),
        "--default-top-k", str(cfg.gateway.default_top_k),
        "--max-top-k", str(cfg.gateway.max_top_k),
        "--transport", cfg.gateway.transport,
        # The token reaches the child through GatewayProcess's environment, never its command line.
        *(["--tool-timeout-s", str(cfg.gateway.tool_timeout_s)] if cfg.gateway.tool_timeout_s else []),
    ]


@dataclass(frozen=True, slots=True)
class RunningGateway:
    """A gateway someone else started: nothing to wait for, nothing to stop."""

    url: str

    def wait_ready(self) -> str:
        return self.url


@contextlib.contextmanager
def gateway_for_run(cfg: RunConfig, corpus_path: Path) -> Iterator[GatewayProcess | RunningGateway]:
    """The configured gateway, or one launched for this run (stopped after it, even on failure)."""
    if cfg.gateway.url:
        logger.info("Using running gateway %s; its tool stats are written where it was started", cfg.gateway.url)
        yield RunningGateway(cfg.gateway.url)
        return
    with tempfile.TemporaryDirectory(prefix="rollout-run-") as tmp:
        retriever_config = Path(tmp) / "retriever.json"
        retriever_config.write_text(json.dumps(cfg.retriever.to_dict()), encoding="utf-8")
        args = gateway_args(cfg, corpus_path, retriever_config)
        token = cfg.gateway.auth_token
        with GatewayProcess(args, ready_timeout_s=cfg.gateway.ready_timeout_s, auth_token=token) as gw:
            yield gw


@contextlib.contextmanager
def ray_session(cfg: RunConfig) -> Iterator[None]:
    """Start Ray for the run unless the caller already did (tests share one Ray)."""
    if ray.is_initialized():
        yield
        return
    ray.init(
        address=cfg.ray_address,
        num_cpus=cfg.ray_num_cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=True,
    )
    try:
        yield
    finally:
        ray.shutdown()


def run_tasks(cfg: RunConfig, url: str, questions: list[Question], trajectory: Path) -> list[TaskResult]:
    """Feed questions to the actors, at most `concurrency_per_worker` in flight each; append results as they finish."""
    env_kwargs = {
        "url": url,
        "gateway_config_path": str(cfg.gateway_config_path),
        "system_prompt": cfg.system_prompt,
        "call_timeout_s": cfg.gateway.call_timeout_s,
        "auth_token": resolve_token(cfg.gateway.auth_token),
    }
    n_workers = max(1, min(cfg.workers, len(questions)))
    actors = [RolloutWorkerActor.remote(f"worker-{i}", env_kwargs, cfg.agent) for i in range(n_workers)]
    queue = iter(questions)
    pending: dict[ray.ObjectRef, tuple[Any, Question]] = {}

    def submit(actor: Any) -> None:
        q = next(queue, None)
        if q is not None:
            pending[actor.run_task.remote(q.to_json())] = (actor, q)

    for actor in actors:
        for _ in range(cfg.concurrency_per_worker):
            submit(actor)
    results: list[TaskResult] = []
    try:
        with trajectory.open("a", encoding="utf-8") as out:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    actor, q = pending.pop(ref)
                    try:
                        result = TaskResult.from_json(ray.get(ref))
                    except ray.exceptions.RayError as e:
                        result = _failed(q, f"worker failed: {e}")
                    out.write(json.dumps(result.to_json()) + "\n")
                    out.flush()
                    results.append(result)
                    submit(actor)
    finally:
        ray.get([a.close.remote() for a in actors])
        for a in actors:
            ray.kill(a)
    return results


def _failed(q: Question, error: str) -> TaskResult:
    return TaskResult(q.id, q.question, list(q.golden_answers), "", [], 0, error, "", 0.0, dict(q.metadata))


def run(cfg: RunConfig) -> RunOutcome:
    """Run one experiment end to end; bad input raises `RolloutError` before anything starts."""
    t0 = time.perf_counter()
    gateway_file = load_gateway_file(cfg.gateway_config_path)
    plan_gateway(gateway_file)  # an unknown tool group fails here, before data, gateway or Ray
    data = prepare_data(cfg.dataset, cfg.cache_dir)
    out = cfg.output_dir
    stats_dir = out / STATS_DIR
    stats_dir.mkdir(parents=True, exist_ok=True)
    # A run starts over in its folder: stale lines would be counted twice.
    for stale in (out / TRAJECTORY_FILE, stats_dir / CALLS_FILE):
        stale.unlink(missing_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg.to_dict())), encoding="utf-8")
    logger.info("Mode %s: %d questions, gateway file %s", cfg.mode_name, len(data.questions), cfg.gateway_config_path)

    # The gateway loads its encoder and indexes while Ray starts.
    with gateway_for_run(cfg, data.corpus_path) as gateway, ray_session(cfg):
        url = gateway.wait_ready()
        logger.info("Gateway ready at %s", url)
        results = run_tasks(cfg, url, data.questions, out / TRAJECTORY_FILE)
    if not cfg.gateway.url:
        write_tool_report(out)
    summary = summarize(
        results, mode=cfg.mode_name, gateway_file=str(cfg.gateway_config_path), wall_time_s=time.perf_counter() - t0
    )
    write_summary(out, summary)
    print_summary(summary, out)
    return RunOutcome(out, summary)
