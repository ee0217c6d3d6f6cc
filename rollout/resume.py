"""Resuming a run in its output folder: which tasks are finished, and whether the tools are the same.

A run records `fingerprint.json`: a hash of its gateway file and of the tool schemas the agent
saw. Rerunning into the same folder keeps the finished tasks (status ok or timeout) and runs the
rest; tasks that ended in an error are run again, since errors are mostly transient (an endpoint
down, a worker lost). Resuming with a different fingerprint would mix two experiments in one
trajectory, so it is refused with what differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError
from rollout.gateway.stats import CALLS_FILE
from rollout.report.calls import STATS_DIR
from rollout.scoring import TRAJECTORY_FILE

logger = logging.getLogger(__name__)

FINGERPRINT_FILE = "fingerprint.json"
FINISHED_STATUSES = ("ok", "timeout")
TASK_ID_KEYS = ("task_id", "rollout/task_id")


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


def _rewrite_jsonl(path: Path, keep: Any, *, in_place: bool = False) -> int:
    """Rewrite `path` keeping the parsed lines `keep(obj)` accepts; returns lines dropped.

    Atomic (a new file replaces the old) unless `in_place`: then the same file is truncated and
    refilled, for a file another process holds open for appending (the gateway's call ledger),
    whose writes would otherwise go to the replaced file and be lost.
    """
    if not path.exists():
        return 0
    tmp = path.with_suffix(path.suffix + ".tmp")
    dropped = 0
    with path.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
        for line in src:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:  # a line cut short when the run was killed mid-write
                dropped += 1
                continue
            if keep(obj):
                dst.write(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    if not in_place:
        os.replace(tmp, path)
        return dropped
    with tmp.open("rb") as src, path.open("r+b") as dst:
        dst.truncate(0)
        shutil.copyfileobj(src, dst)
    tmp.unlink()
    return dropped


def _task_of(call: dict[str, Any]) -> str | None:
    for key in TASK_ID_KEYS:
        if call.get(key) is not None:
            return str(call[key])
    return None


def start_fresh(out_dir: Path) -> None:
    """Forget an earlier run in this folder (resume=false)."""
    for stale in (out_dir / TRAJECTORY_FILE, out_dir / STATS_DIR / CALLS_FILE, out_dir / FINGERPRINT_FILE):
        stale.unlink(missing_ok=True)


def finished_tasks(out_dir: Path, fingerprint: Fingerprint) -> set[str]:
    """Prepare `out_dir` to resume: check the fingerprint, keep finished tasks and their tool calls.

    Returns the ids of tasks not to run again. Raises ConfigError when the folder holds tasks of a
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
    finished: set[str] = set()

    def keep_task(obj: dict[str, Any]) -> bool:
        if obj.get("status", "ok") in FINISHED_STATUSES and obj.get("id") not in finished:
            finished.add(str(obj.get("id")))
            return True
        return False

    dropped = _rewrite_jsonl(trajectory, keep_task)
    # Tool calls of tasks that will run again would be counted twice in the tool stats.
    # The gateway is already appending to its ledger (the fingerprint needs its tools): rewrite in place.
    _rewrite_jsonl(
        out_dir / STATS_DIR / CALLS_FILE, lambda c: _task_of(c) in finished or _task_of(c) is None, in_place=True
    )
    if finished or dropped:
        logger.info("Resuming in %s: %d tasks finished, %d to run again", out_dir, len(finished), dropped)
    write_fingerprint(out_dir, fingerprint)
    return finished
