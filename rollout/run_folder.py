"""A run folder on disk: its file names, and the one reader and writer of each file.

```
RUN/
  config.yaml                      the run's resolved config
  fingerprint.json                 the run's identity (rollout.run.identity; checked by rollout.run.resume)
  tools.json                       the function specs the run offered its agent, as the model was shown them
  .rollout.lock                    held by the driver writing here (rollout.run.lock)
  trajectory.jsonl                 one task per line, appended by the driver
  evaluation_summary.json          scores (rollout.report.scoring)
  tool_stats/realtime_calls.jsonl  one line per tools/call, appended by the gateway (the ledger);
                                   with `gateway.replicas=N`, each replica appends its own
                                   realtime_calls.<replica>.jsonl instead
  tool_stats/report.json           the tool report (rollout.report.tool_calls.report), plus one CSV per table
  tool_stats/degraded_tools.json   tools the gateway lists as degraded, name → reason (only when there are any)
```

Every other module names these files through here. Nothing heavy is imported: the gateway and the
viewer read it too.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollout.jsonl import iter_jsonl
from rollout.records import TaskResult
from rollout.summary import RunSummary

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
FINGERPRINT_FILE = "fingerprint.json"
TOOLS_FILE = "tools.json"
TRAJECTORY_FILE = "trajectory.jsonl"
SUMMARY_FILE = "evaluation_summary.json"
LOCK_FILE = ".rollout.lock"
STATS_DIR = "tool_stats"
CALLS_FILE = "realtime_calls.jsonl"
REPORT_FILE = "report.json"
DEGRADED_FILE = "degraded_tools.json"

LARGE_FIELDS = ("messages", "events")
"""Per-task fields scoring and reports never read; dropped while streaming so large runs stay small."""


def trajectory_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / TRAJECTORY_FILE


def calls_path(run_dir: Path | str) -> Path:
    """The gateway's call ledger of a run folder."""
    return Path(run_dir) / STATS_DIR / CALLS_FILE


def replica_ledger_name(replica: str) -> str:
    """The ledger file of one gateway replica (`realtime_calls.<replica>.jsonl`): replicas never share a file."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in replica)
    return f"{Path(CALLS_FILE).stem}.{safe}.jsonl"


def ledger_paths(run_dir: Path | str) -> list[Path]:
    """Every call ledger of a run folder that exists: the gateway's, then each replica's by name."""
    stats_dir = Path(run_dir) / STATS_DIR
    main = calls_path(run_dir)
    replicas = sorted(stats_dir.glob(f"{main.stem}.*.jsonl")) if stats_dir.is_dir() else []
    return ([main] if main.is_file() else []) + replicas


def ledger_source(path: Path) -> str:
    """Which gateway wrote a ledger: "gateway" for the single gateway's, else the replica's name."""
    if path.name == CALLS_FILE:
        return "gateway"
    return path.name[len(Path(CALLS_FILE).stem) + 1:-len(".jsonl")]


def report_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / STATS_DIR / REPORT_FILE


def degraded_tools_path(run_dir: Path | str) -> Path:
    """Where the gateway keeps the tools it lists as degraded (`rollout.gateway.stats.StatsCollector`)."""
    return Path(run_dir) / STATS_DIR / DEGRADED_FILE


def read_degraded_tools(run_dir: Path | str) -> dict[str, str]:
    """Name → reason of the tools the run's gateway listed as degraded; none without the file."""
    data = read_json(degraded_tools_path(run_dir)) or {}
    return {str(name): str(reason) for name, reason in data.items()}


def summary_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / SUMMARY_FILE


def is_run_folder(path: Path | str) -> bool:
    """A folder a run wrote its trajectory into."""
    return trajectory_path(path).is_file()


def iter_trajectory(path: Path | str, *, full: bool = False, keep: Iterable[str] = ()) -> Iterator[TaskResult]:
    """The tasks of a trajectory file (or of a run folder's), one at a time.

    Without `full`, each task's messages and events are dropped as it is read, but those of `LARGE_FIELDS`
    named in `keep`. Lines that are not JSON objects are skipped with a warning (`iter_jsonl`), and so are
    records that are not tasks.
    """
    path = Path(path)
    if path.is_dir():
        path = trajectory_path(path)
    dropped = () if full else tuple(k for k in LARGE_FIELDS if k not in keep)
    for data in iter_jsonl(path):
        for key in dropped:
            data.pop(key, None)
        try:
            task = TaskResult.from_json(data)
        except (ValueError, TypeError, AttributeError) as e:
            logger.warning("%s: skipping a record that is not a task (%s)", path, e)
            continue
        yield task


def append_task(file: Any, result: TaskResult) -> None:
    """Append one task to an open trajectory file and flush it, so a crash keeps it. In a run, the only
    place a finished task becomes JSON: worker, scheduler and driver pass the `TaskResult` itself."""
    file.write(json.dumps(result.to_json()) + "\n")
    file.flush()


def write_json(path: Path, data: Any) -> Path:
    """Write `data` as indented JSON through a temporary file: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: replicas of a gateway write side by side
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or unreadable (with a warning)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as e:
        logger.warning("%s: unreadable (%s)", path, e)
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class RunTools:
    """What tools.json holds: the tools the run's environment offered its agent, as the model was shown them."""

    specs: list[dict[str, Any]]
    """OpenAI-style function specs (`{"type": "function", "function": {name, description, parameters}}`), in
    the order the environment lists them; the fingerprint holds their hashes."""
    dynamic_toolsets: bool = False
    """The gateway file switches tool sets per task: a task was offered only some of these, at some turns
    (its record's `offered_tools` names them)."""

    def named(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """The specs of these tools, in the order the environment lists them; KeyError for a name it does not list."""
        wanted = set(names)
        unknown = wanted - {spec_name(s) for s in self.specs}
        if unknown:
            raise KeyError(", ".join(sorted(unknown)))
        return [s for s in self.specs if spec_name(s) in wanted]

    def to_json(self) -> dict[str, Any]:
        return {"tools": self.specs, "dynamic_toolsets": self.dynamic_toolsets}


def spec_name(spec: dict[str, Any]) -> str:
    """The tool name of a function spec (or of a bare function object)."""
    return str((spec.get("function") or spec).get("name"))


def tools_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / TOOLS_FILE


def write_tools(run_dir: Path | str, tools: RunTools) -> Path:
    return write_json(tools_path(run_dir), tools.to_json())


def read_tools(run_dir: Path | str) -> RunTools | None:
    """The run's tools.json, or None when it has none (runs before it was written) or it is unreadable (with a
    warning)."""
    path = tools_path(run_dir)
    data = read_json(path)
    specs = None if data is None else data.get("tools")
    if data is None or not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        if data is not None:
            logger.warning("%s: not a tools file (no list of specs under \"tools\")", path)
        return None
    return RunTools(specs, bool(data.get("dynamic_toolsets", False)))


def read_config(run_dir: Path | str) -> dict[str, Any] | None:
    """The run's config.yaml as a mapping, or None when it has none or it is unreadable (with a warning)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        logger.warning("%s: unreadable (%s)", path, e)
        return None
    return data if isinstance(data, dict) else None


def write_summary(run_dir: Path | str, summary: RunSummary) -> Path:
    return write_json(summary_path(run_dir), summary.to_json())


def read_summary(run_dir: Path | str) -> RunSummary | None:
    """The run's evaluation summary (older versions' files too), or None when it has none or it is
    unreadable (with a warning)."""
    path = summary_path(run_dir)
    data = read_json(path)
    if data is None:
        return None
    try:
        return RunSummary.from_json(data)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        logger.warning("%s: not an evaluation summary (%s)", path, e)
        return None


def write_report(run_dir: Path | str, report: dict[str, Any]) -> Path:
    return write_json(report_path(run_dir), report)
