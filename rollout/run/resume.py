"""Resuming a run in its output folder: which tasks are finished, and whether it is the same experiment.

A run records its identity (`rollout.run.identity.RunIdentity`) in `fingerprint.json`: every setting
that can change a result, and hashes of its gateway file, tool schemas and dataset. Rerunning
into the same folder keeps the finished tasks (status ok) and runs the rest: tasks that ended in
an error, a timeout or an infrastructure failure run again, since those are mostly
transient (an endpoint down, a worker lost, a gateway restarting). Resuming with a different
identity would mix two experiments in one trajectory, so it is refused with what differs.

The gateway's call ledger is never rewritten: the tool report counts only the calls of the task
records the trajectory keeps (joined on call id), and lists the rest as discarded attempts. So a
crash or Ctrl-C at any point leaves a complete ledger.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError
from rollout.jsonl import iter_jsonl
from rollout.records import Question, TaskKey, task_key
from rollout.run.identity import RunIdentity
from rollout.run.scheduler import PlannedTask
from rollout.run.sweep_folders import in_a_sweep
from rollout.run_folder import FINGERPRINT_FILE, ledger_paths, tools_path, trajectory_path, write_json

logger = logging.getLogger(__name__)

FINISHED_STATUSES = ("ok",)


def read_identity(out_dir: Path) -> RunIdentity | None:
    path = out_dir / FINGERPRINT_FILE
    if not path.exists():
        return None
    try:
        return RunIdentity.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{path} is not a run identity this version wrote ({e}); "
                          "use resume=false to start over, or choose another output_dir=") from e


def write_identity(out_dir: Path, identity: RunIdentity) -> None:
    write_json(out_dir / FINGERPRINT_FILE, identity.to_json())


def _rewrite_jsonl(path: Path, keep: Any) -> int:
    """Atomically rewrite `path` keeping the parsed lines `keep(obj)` accepts; returns lines dropped."""
    if not path.exists():
        return 0
    tmp = path.with_suffix(path.suffix + ".tmp")
    dropped = 0
    with tmp.open("w", encoding="utf-8") as dst:
        for obj in iter_jsonl(path):
            if keep(obj):
                dst.write(json.dumps(obj) + "\n")
            else:
                dropped += 1
    os.replace(tmp, path)
    return dropped


def start_fresh(out_dir: Path) -> None:
    """Forget an earlier run in this folder (resume=false)."""
    for stale in (trajectory_path(out_dir), *ledger_paths(out_dir), out_dir / FINGERPRINT_FILE, tools_path(out_dir)):
        stale.unlink(missing_ok=True)


def finished_tasks(out_dir: Path, identity: RunIdentity) -> set[TaskKey]:
    """Prepare `out_dir` to resume: check the identity, keep the finished tasks' records.

    Returns the (question id, repeat) of tasks not to run again. Raises ConfigError when the folder
    holds tasks of a run with a different identity.
    """
    trajectory = trajectory_path(out_dir)
    has_tasks = trajectory.exists() and trajectory.stat().st_size > 0
    earlier = read_identity(out_dir) if has_tasks else None
    if earlier is not None and (diff := identity.differences(earlier)):
        # A sweep's folders are named by the keys it varies alone: a setting its jobs share can differ.
        elsewhere = ("file the sweep's jobs elsewhere with dataset.name=NAME (results/NAME/...)" if in_a_sweep()
                     else "choose another output_dir=")
        raise ConfigError(
            f"{out_dir} holds another experiment ({'; '.join(diff)}). Resuming would mix two experiments "
            f"in one folder: pass resume=false to start over, or {elsewhere}"
        )
    finished: set[TaskKey] = set()

    def keep_task(obj: dict[str, Any]) -> bool:
        key = task_key(obj)
        if obj.get("status", "ok") in FINISHED_STATUSES and key not in finished:
            finished.add(key)
            return True
        return False

    dropped = _rewrite_jsonl(trajectory, keep_task)
    if finished or dropped:
        logger.info("Resuming in %s: %d tasks finished, %d to run again", out_dir, len(finished), dropped)
    write_identity(out_dir, identity)
    return finished


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """How the finished tasks of an earlier run meet this run's questions."""

    already: int
    """Tasks this run asks that finished earlier: they are not run again."""
    not_asked: frozenset[TaskKey]
    """Finished tasks this run no longer asks (a smaller `dataset.limit` or `repeats`): left out of its summary."""


def plan_resume(finished: set[TaskKey], questions: Iterable[Question], repeats: int) -> ResumePlan:
    """Match `finished` against the (question, repeat) pairs of this run, in one pass over its questions.

    Memory is that of `finished`, which only a resumed run has: a fresh run holds nothing per task."""
    if not finished:
        return ResumePlan(0, frozenset())
    not_asked = set(finished)
    for q in questions:
        for r in range(repeats):
            not_asked.discard((q.id, r))
    return ResumePlan(len(finished) - len(not_asked), frozenset(not_asked))


def tasks_to_run(questions: Iterable[Question], repeats: int, seed: int, finished: set[TaskKey]) -> Iterator[PlannedTask]:
    """The tasks not finished yet, repeat by repeat (so an interrupted run holds whole repeats first), drawn
    from the question source as the scheduler asks for them."""
    for r in range(repeats):
        for q in questions:
            if (q.id, r) not in finished:
                yield PlannedTask(q, r, seed + r)
