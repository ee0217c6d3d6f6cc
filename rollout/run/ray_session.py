"""The Ray a run uses: the caller's, one started for the run, or, within a sweep, one its jobs share.

Starting a local Ray takes seconds (its processes start and import Ray one after another). A run's own Ray starts
without two head processes it never uses and without a one-second wait (`rollout.run.ray_start`). A sweep (`python -m
rollout -m ...`) runs its jobs one after another in one process: within `ray_for_the_sweep()` the Ray a job starts
stays up for the next job with the same Ray settings, and is shut down when the sweep ends. A job with other settings
(another `ray.address`, `ray.num_cpus` or verbosity) gets a Ray of its own.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import ray

from rollout.logs import RAY_WORKER_SETUP_HOOK, levels, ray_worker_env
from rollout.ray_console import forward_worker_logs, quiet_token_notice
from rollout.run.config import RaySettings
from rollout.run.ray_start import lean_start

logger = logging.getLogger(__name__)


class _Sweep:
    """What `ray_session` needs to know of the sweep it runs in, if any."""

    active = False
    """Within `ray_for_the_sweep()`: a Ray a run starts is left up for the next run."""
    settings: tuple[dict[str, Any], dict[str, str]] | None = None
    """The `ray.init` arguments and the worker environment of the Ray the sweep keeps up; None while it keeps none."""


_sweep = _Sweep()


def worker_env_vars(ray_cfg: RaySettings) -> dict[str, str]:
    """Variables workers on other nodes need from the driver's environment: the LLM key `llm.api_key_env` names.

    (The gateway token travels in `EnvSpec`.) Values go to Ray's runtime environment, not to any file of the run."""
    name = ray_cfg.api_key_env
    return {name: os.environ[name]} if name and os.environ.get(name) else {}


def ray_settings(ray_cfg: RaySettings) -> dict[str, Any]:
    """The `ray.init` arguments of a run's own Ray."""
    settings: dict[str, Any] = {
        # `ray.address: null` means a Ray of the run's own: Ray's default would join any cluster a `ray start`
        # left on this machine (or $RAY_ADDRESS names), with its CPUs and its workers' environment.
        "address": ray_cfg.address or "local",
        "num_cpus": ray_cfg.num_cpus,
        "include_dashboard": False,
        "logging_level": levels(ray_cfg.verbose).libraries,  # Ray's start-up lines are library detail
        "log_to_driver": True,
    }
    if ray_cfg.address:
        # Joining a cluster, workers on other nodes do not inherit this process's environment: it goes in Ray's
        # runtime environment, and the setup hook gives each worker the run's log format before any task.
        settings["runtime_env"] = {"env_vars": {**worker_env_vars(ray_cfg), **ray_worker_env(ray_cfg.verbose)},
                                   "worker_process_setup_hook": RAY_WORKER_SETUP_HOOK}
    return settings


def local_worker_env(ray_cfg: RaySettings) -> dict[str, str]:
    """What a local Ray's workers need from this process's environment (`ray_session` sets it before `ray.init`).

    A local Ray's workers are children of the raylet this process starts, so they inherit its environment, and each
    worker sets the run's log format when it starts (`rollout.run.worker.RolloutWorker`). A runtime environment
    would do the same at a price: Ray then starts a new process for each actor instead of handing it one of the
    workers it started with the node (about a second each on two cores, on every run's critical path)."""
    return {} if ray_cfg.address else ray_worker_env(ray_cfg.verbose)


@contextlib.contextmanager
def ray_session(ray_cfg: RaySettings) -> Iterator[None]:
    """Ray for the run: the one the caller started (tests share one), the sweep's if it has the run's settings, or
    one started now (shut down after the run, or when the sweep ends)."""
    settings = ray_settings(ray_cfg)
    worker_env = local_worker_env(ray_cfg)
    quiet_token_notice()
    if ray.is_initialized():
        if _sweep.settings in (None, (settings, worker_env)):  # the caller's Ray, or the sweep's for these settings
            forward_worker_logs()
            yield
            return
        _shutdown("the sweep's Ray, started with other settings")
        _sweep.settings = None
    os.environ.update(worker_env)  # before the raylet starts: its workers inherit it
    with lean_start() if settings["address"] == "local" else contextlib.nullcontext():
        ray.init(**copy.deepcopy(settings))  # Ray adds to the runtime_env it is given
    forward_worker_logs()
    if _sweep.active:
        _sweep.settings = (settings, worker_env)
        logger.info("Started Ray, kept up for the sweep's next jobs")
        yield
        return
    try:
        yield
    finally:
        _shutdown("the run's Ray")


@contextlib.contextmanager
def ray_for_the_sweep() -> Iterator[None]:
    """Runs within share the Ray the first of them starts (see the module docstring); it is shut down on leaving."""
    _sweep.active = True
    try:
        yield
    finally:
        _sweep.active = False
        if _sweep.settings is not None:
            _sweep.settings = None
            _shutdown("the sweep's Ray")


def _shutdown(what: str) -> None:
    started = time.perf_counter()
    ray.shutdown()
    logger.debug("Shut down %s in %.1f s", what, time.perf_counter() - started)
