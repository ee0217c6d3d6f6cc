"""The gateway process a run launches: one of its own, or, within a sweep, one its jobs share.

Loading a gateway (its encoder and indexes) takes seconds. A sweep (`python -m rollout -m ...`) runs its jobs one
after another in one process: within `gateway_for_the_sweep()` the gateway a job launches stays up for the next jobs
whose gateway would be the same one (`GatewayKey`: every argument but `--output-dir`, so the same gateway file,
corpus, cache and limits; the same retriever settings, host and token), and is stopped when the sweep ends, even on
failure or Ctrl-C. A job whose gateway would differ stops the kept one and launches its own, which the sweep keeps
next (as `rollout.run.ray_session` does for Ray with other settings). A Ray Serve gateway (`gateway.replicas > 1`)
is never shared (a registration would reach one replica of many); a job using one, or a gateway the user runs
(`gateway.url`), stops the kept one too (`stop_the_sweeps_gateway`), so that no idle gateway holds its indexes in
memory beside the one the job uses.

Each run registers its folder with the gateway it uses (`GatewayProcess.register_run`, done by the driver), so the
calls it makes land in its own `tool_stats/realtime_calls.jsonl` whichever job started the gateway
(`rollout.gateway.stats.RunLedgers`). The kept gateway's `--output-dir` is the first job's folder; only a call of no
registered run (none of a sweep's) would land there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.run.gateway_process import GatewayProcess
from rollout.wire import resolve_token

logger = logging.getLogger(__name__)

_PER_RUN_OPTIONS = ("--output-dir", "--retriever-config")
"""Options whose value differs between runs with the same gateway: the run's folder (its calls go there by
registration instead), and a temporary file (compared by its content instead)."""


@dataclass(frozen=True, slots=True)
class GatewayKey:
    """What makes the gateways of two runs the same one."""

    args: tuple[str, ...]
    """The gateway's arguments without `_PER_RUN_OPTIONS`."""
    retriever: str
    """The retriever settings the `--retriever-config` file holds, as JSON."""
    host: str
    token: str | None = field(repr=False)

    @classmethod
    def of(cls, args: list[str], retriever: Mapping[str, Any], host: str, token: str | None) -> GatewayKey:
        kept: list[str] = []
        skip = False
        for arg in args:
            if skip:
                skip = False
            elif arg in _PER_RUN_OPTIONS:
                skip = True
            else:
                kept.append(arg)
        return cls(tuple(kept), json.dumps(retriever, sort_keys=True), host, token)


class _Sweep:
    """What `gateway_process` needs to know of the sweep it runs in, if any."""

    active = False
    """Within `gateway_for_the_sweep()`: a gateway a run launches is left up for the next runs."""
    key: GatewayKey | None = None
    gateway: GatewayProcess | None = None
    """The gateway the sweep keeps up; None while it keeps none."""
    owned: contextlib.ExitStack | None = None
    """The kept gateway and the temporary folder its arguments name, closed together when it stops."""

    def keep(self, key: GatewayKey, gateway: GatewayProcess, owned: contextlib.ExitStack) -> None:
        self.key, self.gateway, self.owned = key, gateway, owned

    def stop(self) -> None:
        owned = self.owned
        self.key, self.gateway, self.owned = None, None, None
        if owned is not None:
            owned.close()


_sweep = _Sweep()


@contextlib.contextmanager
def gateway_process(args_for: Callable[[Path], list[str]], retriever: Mapping[str, Any], *, host: str,
                    auth_token: str | None, ready_timeout_s: float) -> Iterator[GatewayProcess]:
    """The run's gateway process: the sweep's if it is the same gateway, else one launched now (stopped after the
    run, or kept for the sweep's next jobs).

    `args_for(retriever_config)` gives the gateway's arguments naming the file that holds `retriever`; the file is
    written here, in a temporary folder that lives as long as the gateway (a restarted one reads it again)."""
    with contextlib.ExitStack() as owned:
        folder = Path(owned.enter_context(tempfile.TemporaryDirectory(prefix="rollout-run-")))
        retriever_config = folder / "retriever.json"
        retriever_config.write_text(json.dumps(dict(retriever)), encoding="utf-8")
        args = args_for(retriever_config)
        key = GatewayKey.of(args, retriever, host, resolve_token(auth_token))
        kept = _sweep.gateway
        if kept is not None and _sweep.key == key and kept.is_alive():
            url = kept.wait_ready()  # at once, unless the job that launched it ended before it was ready
            logger.info("Using the sweep's gateway at %s", url)
            yield kept
            return
        stop_the_sweeps_gateway("this job's gateway differs" if _sweep.key != key else "it is no longer running")
        gateway = owned.enter_context(GatewayProcess(args, host=host, ready_timeout_s=ready_timeout_s,
                                                     auth_token=auth_token))
        if _sweep.active:
            _sweep.keep(key, gateway, owned.pop_all())  # it and its files now live until the sweep ends
        yield gateway


def kept_for_the_sweep(gateway: object) -> bool:
    """True when `gateway` is the one the sweep keeps for its next jobs (it must not be stopped with this run)."""
    return gateway is not None and gateway is _sweep.gateway


def stop_the_sweeps_gateway(why: str) -> None:
    """Stop the gateway the sweep keeps, if any (the next job that launches one keeps its own)."""
    if _sweep.gateway is not None:
        logger.debug("Stopping the sweep's gateway at %s: %s", _sweep.gateway.url, why)
        _sweep.stop()


@contextlib.contextmanager
def gateway_for_the_sweep() -> Iterator[None]:
    """Runs within share the gateways they launch (see the module docstring); the one kept is stopped on leaving."""
    _sweep.active = True
    try:
        yield
    finally:
        _sweep.active = False
        _sweep.stop()
