"""A run refused before it started (bad input, exit 2) leaves no folder behind.

Hydra creates the job's folder and opens its log (conf/hydra/job_logging) before the run reads its config, and the
driver takes the folder's lock (`rollout.run.lock`) before it checks the gateway file and the data. A refused run
removes what it created: the folder, when it held nothing before the run started (absent, or only an empty log),
and the parents this left empty up to the working directory. A folder that held anything else (an earlier run's
files) is left as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

JOB_LOG = "rollout.log"
"""The job's log Hydra opens in the folder first (`hydra.job.name` + `.log`)."""


def holds_nothing(folder: Path) -> bool:
    """True when `folder` does not exist or holds only an empty job log: a run refused in it may remove it."""
    folder = Path(folder)
    if not folder.exists():
        return True
    if not folder.is_dir():
        return False
    return all(p.name == JOB_LOG and p.is_file() and p.stat().st_size == 0 for p in folder.iterdir())


def holds_only_the_log(folder: Path) -> bool:
    """True when `folder` holds nothing but the job log (of any size)."""
    return Path(folder).is_dir() and all(p.name == JOB_LOG and p.is_file() for p in Path(folder).iterdir())


def remove_refused_folder(folder: Path) -> None:
    """Remove the folder of a refused run, which `holds_nothing` said was its own, and the parents left empty
    between it and the working directory."""
    folder = Path(folder).absolute()
    cwd = Path.cwd().absolute()
    if cwd.is_relative_to(folder):  # output_dir=. (or a parent of it): the user's own folder, never removed
        return
    shutil.rmtree(folder, ignore_errors=True)
    parent = folder.parent
    while parent != cwd and parent.is_relative_to(cwd):
        try:
            parent.rmdir()  # only an empty folder goes
        except OSError:
            return
        parent = parent.parent
