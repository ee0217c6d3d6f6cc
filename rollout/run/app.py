"""Hydra application: compose the config, make it typed, run it, and say how it ended.

The exit code (0; 1 when no task ended ok; 2 for bad input; 130 for Ctrl-C) and the line saying why come
from `rollout.run.outcome`; a sweep (`-m`) runs every job whatever the others did, all on one Ray
(`rollout.run.ray_session`), jobs with the same gateway on one gateway (`rollout.run.sweep_gateway`).

The gateway token never reaches disk: Hydra writes the command line to `multirun.yaml` and its
logs before the run starts, so a literal `gateway.auth_token=` is refused before Hydra sees it.
The token comes from `$ROLLOUT_GATEWAY_TOKEN` (or an `${oc.env:NAME}` interpolation).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rollout.data.dataset import unread_dataset_override
from rollout.hydra_argv import hydra_argv
from rollout.logs import apply_verbosity
from rollout.paths import CONF_DIR
from rollout.run.config import RunConfig
from rollout.run.driver import run
from rollout.run.interpolations import unknown_interpolation
from rollout.run.outcome import EXIT_BAD_INPUT, EXIT_INTERRUPTED, JobEnd, RunOutcome, job_end, sweep_end
from rollout.run.ray_session import ray_for_the_sweep
from rollout.run.refused import holds_nothing, holds_only_the_log, remove_refused_folder
from rollout.run.sweep_folders import sweeping, swept_keys
from rollout.run.sweep_gateway import gateway_for_the_sweep
from rollout.wire import TOKEN_ENV

logger = logging.getLogger("rollout")


def run_job(cfg: DictConfig) -> JobEnd:
    """One job: the composed config made typed and run; how it ended, its line (if any) printed to stderr."""
    folder = _hydra_job_folder()
    new_folder = folder is not None and holds_nothing(folder)
    end = job_end(lambda: _run(cfg), _job_folder(cfg))
    if end.code == EXIT_BAD_INPUT and new_folder and holds_only_the_log(folder):
        remove_refused_folder(folder)  # refused before the driver took the folder: only Hydra's log is in it
    if end.line is not None:
        print(end.line, file=sys.stderr)
    return end


def _job_folder(cfg: DictConfig) -> str:
    """The job's output folder as the config names it, to name a failed job of a sweep."""
    try:
        return str(cfg.output_dir)
    except Exception:  # noqa: BLE001 - a config that cannot say (a missing value) is named by its job number
        return f"job {HydraConfig.get().job.get('num', 0)}"


def _hydra_job_folder() -> Path | None:
    """The folder Hydra made for this job (and opened its log in); None outside a Hydra job."""
    if not HydraConfig.initialized():
        return None
    folder = HydraConfig.get().runtime.get("output_dir")
    return Path(folder) if folder else None


def _run(cfg: DictConfig) -> RunOutcome:
    run_cfg = RunConfig.from_hydra(cfg)
    # Hydra's job logging gave the format (conf/hydra/job_logging); the levels and progress bars follow -v/-q.
    apply_verbosity(run_cfg.verbose)
    return run(run_cfg)


def token_on_command_line(args: list[str]) -> str | None:
    """The override that would put a literal gateway token on disk, if any."""
    for arg in args:
        key, sep, value = arg.partition("=")
        value = value.strip("'\"")
        if sep and key.lstrip("+~") == "gateway.auth_token" and value not in ("", "null") and not value.startswith("${"):
            return key
    return None


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """`python -m rollout OVERRIDES...` (also `rollout run`): argv defaults to the process's command line.

    Everything in argv goes to Hydra: `key=value` overrides, `-m` for a sweep, `--help`, `--cfg job`; `-v`/`-q`
    go as `verbose=N`. Returns the exit code (`rollout.run.outcome`); a sweep goes on past a job that failed
    and ends with one line naming the failed jobs.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if key := token_on_command_line(args):
        print(f"error: {key}= on the command line would be written to multirun.yaml and Hydra's logs; "
              f"export {TOKEN_ENV}=<token> instead (or pass {key}='${{oc.env:YOUR_VARIABLE}}')", file=sys.stderr)
        return EXIT_BAD_INPUT
    if problem := unknown_interpolation(args) or unread_dataset_override(args):
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    jobs: list[JobEnd] = []

    # A sweep's jobs are named by the keys it varies (rollout.run.sweep_folders).
    with hydra_argv(args, prog), sweeping(swept_keys(args)), contextlib.ExitStack() as until_the_end:

        # An absolute path: under `python -m`, Hydra would resolve a relative one as a Python module.
        @hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
        def hydra_main(cfg: DictConfig) -> JobEnd:
            if not jobs and HydraConfig.get().mode == RunMode.MULTIRUN:
                until_the_end.enter_context(ray_for_the_sweep())  # the jobs share one Ray...
                until_the_end.enter_context(gateway_for_the_sweep())  # ...and a gateway while theirs is the same
            end = run_job(cfg)
            jobs.append(end)
            if end.code == EXIT_INTERRUPTED:
                raise KeyboardInterrupt  # Ctrl-C stops a sweep too, not only its running job
            return end  # a sweep's next job starts, and its comparison callback sees this one

        try:
            hydra_main()
        except KeyboardInterrupt:
            if not jobs or jobs[-1].code != EXIT_INTERRUPTED:
                print("stopped: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    end = sweep_end(jobs)
    if len(jobs) > 1 and end.line is not None:
        print(end.line, file=sys.stderr)
    return end.code
