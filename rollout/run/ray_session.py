"""The Ray a run uses: the caller's, one started for the run, or, within a sweep, one its jobs share.

Starting a local Ray takes seconds (its processes start and import Ray one after another). A sweep (`python -m
rollout -m ...`) runs its jobs one after another in one process: within `ray_for_the_sweep()` the Ray a job starts
stays up for the next job with the same Ray settings, and is shut down when the sweep ends. A job with other settings
(another `ray.address`, `ray.num_cpus` or verbosity) gets a Ray of its own.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from collections.abc import Iterator
from typing import Any

import ray

from rollout.logs import RAY_WORKER_SETUP_HOOK, levels, ray_worker_env
from rollout.run.config import RunConfig
from rollout.run.ray_console import forward_worker_logs, quiet_token_notice

logger = logging.getLogger(__name__)


class _Sweep:
    """What `ray_session` needs to know of the sweep it runs in, if any."""

    active = False
    """Within `ray_for_the_sweep()`: a Ray a run starts is left up for the next run."""
    settings: dict[str, Any] | None = None
    """The `ray.init` arguments of the Ray the sweep keeps up; None while it keeps none."""


_sweep = _Sweep()


def worker_env_vars(cfg: RunConfig) -> dict[str, str]:
    """Variables workers on other nodes need from the driver's environment: the LLM key `llm.api_key_env` names.

    (The gateway token travels in `EnvSpec`.) Values go to Ray's runtime environment, not to any file of the run."""
    llm = cfg.agent.get("llm")
    name = llm.get("api_key_env") if isinstance(llm, dict) else None
    return {name: os.environ[name]} if name and os.environ.get(name) else {}


def ray_settings(cfg: RunConfig) -> dict[str, Any]:
    """The `ray.init` arguments of a run's own Ray."""
    # Joining a cluster, workers on other nodes do not inherit this process's environment.
    env_vars = worker_env_vars(cfg) if cfg.ray_address else {}
    # `ray.address: null` means a Ray of the run's own: Ray's default would join any cluster a `ray start`
    # left on this machine (or $RAY_ADDRESS names), with its CPUs and its workers' environment.
    return {
        "address": cfg.ray_address or "local",
        "num_cpus": cfg.ray_num_cpus,
        "include_dashboard": False,
        "logging_level": levels(cfg.verbose).libraries,  # Ray's start-up lines are library detail
        "log_to_driver": True,
        # Each worker logs in the run's format at its verbosity; Ray forwards the lines, and `ray_session` has them
        # logged here (rollout.run.ray_console) rather than printed with Ray's prefixes.
        "runtime_env": {"env_vars": {**env_vars, **ray_worker_env(cfg.verbose)},
                        "worker_process_setup_hook": RAY_WORKER_SETUP_HOOK},
    }


@contextlib.contextmanager
def ray_session(cfg: RunConfig) -> Iterator[None]:
    """Ray for the run: the one the caller started (tests share one), the sweep's if it has the run's settings, or
    one started now (shut down after the run, or when the sweep ends)."""
    settings = ray_settings(cfg)
    quiet_token_notice()
    if ray.is_initialized():
        if _sweep.settings in (None, settings):  # the caller's Ray, or the one the sweep keeps for these settings
            forward_worker_logs()
            yield
            return
        ray.shutdown()  # the sweep's Ray, started with other settings
        _sweep.settings = None
    ray.init(**copy.deepcopy(settings))  # Ray adds to the runtime_env it is given
    forward_worker_logs()
    if _sweep.active:
        _sweep.settings = settings
        logger.info("Started Ray, kept up for the sweep's next jobs")
        yield
        return
    try:
        yield
    finally:
        ray.shutdown()


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
            ray.shutdown()
