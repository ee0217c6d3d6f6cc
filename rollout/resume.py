"""Resuming a run in its output folder: which tasks are finished, and whether the tools are the same.

A run records `fingerprint.json`: a hash of its gateway file and of the tool schemas the agent
saw. Rerunning into the same folder keeps the finished tasks (status ok) and runs the rest: tasks
that ended in an error, a timeout or an infrastructure failure run again, since those are mostly
transient (an endpoint down, a worker lost, a gateway restarting). Resuming with a different
fingerprint would mix two experiments in one trajectory, so it is refused with what differs.

The gateway's call ledger is never rewritten: the tool report counts only the calls of the task
records the trajectory keeps (joined on call id), and lists the rest as discarded attempts. So a
crash or Ctrl-C at any point leaves a complete ledger.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError
from rollout.jsonl import iter_jsonl
from rollout.records import TaskKey, task_key
from rollout.run_folder import CALLS_FILE, FINGERPRINT_FILE, STATS_DIR, TRAJECTORY_FILE

logger = logging.getLogger(__name__)

FINISHED_STATUSES = ("ok",)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What must stay the same for two parts of one run to be comparable."""

    gateway_file: str
    """Path of the gateway file (informational; the hash decides)."""
    gateway_file_sha256: str
    tool_schemas_sha256: str
    """Hash of the tool specs the agent was offered, in canonical JSON."""
    tools: dict[str, str]
    """Per tool name, the hash of its spec: says which tool changed."""

    @classmethod
    def of(cls, gateway_file: Path, tool_specs: list[dict[str, Any]]) -> Fingerprint:
        per_tool = {
            str((spec.get("function") or spec).get("name")): _sha256(json.dumps(spec, sort_keys=True).encode())
            for spec in tool_specs
        }
        return cls(
            gateway_file=str(gateway_file),
            gateway_file_sha256=_sha256(Path(gateway_file).read_bytes()),
            tool_schemas_sha256=_sha256(json.dumps(per_tool, sort_keys=True).encode()),
            tools=dict(sorted(per_tool.items())),
        )

    def differences(self, earlier: Fingerprint) -> list[str]:
        """What changed since `earlier`, in words; empty when nothing did."""
        found = []
        if self.gateway_file_sha256 != earlier.gateway_file_sha256:
            found.append(f"the gateway file changed ({earlier.gateway_file} → {self.gateway_file})")
        added = sorted(set(self.tools) - set(earlier.tools))
        removed = sorted(set(earlier.tools) - set(self.tools))
        changed = sorted(n for n in set(self.tools) & set(earlier.tools) if self.tools[n] != earlier.tools[n])
        for words, names in (("tools added", added), ("tools removed", removed), ("tool schemas changed", changed)):
            if names:
                found.append(f"{words}: {', '.join(names)}")
        return found


def read_fingerprint(out_dir: Path) -> Fingerprint | None:
    path = out_dir / FINGERPRINT_FILE
    if not path.exists():
        return None
    try:
        return Fingerprint(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{path} is not a fingerprint this version wrote ({e}); use resume=false to start over") from e


def write_fingerprint(out_dir: Path, fingerprint: Fingerprint) -> None:
    (out_dir / FINGERPRINT_FILE).write_text(json.dumps(asdict(fingerprint), indent=2) + "\n", encoding="utf-8")


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
    for stale in (out_dir / TRAJECTORY_FILE, out_dir / STATS_DIR / CALLS_FILE, out_dir / FINGERPRINT_FILE):
        stale.unlink(missing_ok=True)


def finished_tasks(out_dir: Path, fingerprint: Fingerprint) -> set[TaskKey]:
    """Prepare `out_dir` to resume: check the fingerprint, keep the finished tasks' records.

    Returns the (question id, repeat) of tasks not to run again. Raises ConfigError when the folder holds tasks of a
    run with a different fingerprint.
    """
    trajectory = out_dir / TRAJECTORY_FILE
    earlier = read_fingerprint(out_dir)
    has_tasks = trajectory.exists() and trajectory.stat().st_size > 0
    if has_tasks and earlier is not None and (diff := fingerprint.differences(earlier)):
        raise ConfigError(
            f"{out_dir} holds a run with different tools: {'; '.join(diff)}. Resuming would mix two "
            "experiments: pass resume=false to start over, or choose another output_dir="
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
    write_fingerprint(out_dir, fingerprint)
    return finished
