"""Per-task metrics beyond the built-in ones, kept beside a run in `scores/NAME.jsonl`.

A run folder may hold a folder `scores/` of files `NAME.jsonl`, one line per task:

    {"id": "q17", "repeat": 0, "metrics": {"judge_correct": 1.0, "not_attempted": 0.0}}

Values are numbers or null (not applicable: the task does not count in that metric's mean). A later line for the
same (id, repeat) replaces an earlier one. `scores/NAME.meta.json` may say where the file comes from
(`{"source": "judge", "label": ...}`); it only names the source.

Whoever computes such metrics (the run's own scorers, `rollout.report.user_scorers`; an LLM judge) writes them with
`write_scores`; the summary, `report compare` and the viewer read them all with `read_scores`. Each metric belongs
to one file: a name met in two files, or one of the built-in metrics, is an error naming both.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.errors import ReportError
from rollout.jsonl import iter_json_lines
from rollout.records import TaskKey
from rollout.run_folder import read_json, write_json
from rollout.summary import BUILTIN_METRICS

SCORES_DIR = "scores"
"""The folder of a run holding its scores files."""

TaskMetrics = dict[str, float | None]
"""One task's extra metrics, name → value (None: not applicable to this task)."""


@dataclass(frozen=True, slots=True)
class ScoreRow:
    """One line of a scores file."""

    id: str
    """Question id."""
    repeat: int
    """Which repeat of the question (0-based)."""
    metrics: TaskMetrics
    """Metric name → value."""

    @property
    def key(self) -> TaskKey:
        return self.id, self.repeat

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "repeat": self.repeat, "metrics": dict(self.metrics)}


@dataclass(frozen=True, slots=True)
class ExtraScores:
    """Every scores file of a run, merged."""

    tasks: dict[TaskKey, TaskMetrics] = field(default_factory=dict)
    """(id, repeat) → its metrics from every file."""
    metrics: tuple[str, ...] = ()
    """Every metric name, in file name order, then in the order each file first names them."""
    sources: dict[str, str] = field(default_factory=dict)
    """Metric name → the file's source: `source` of its meta file, else the file's name (`user`, `judge`)."""
    files: tuple[str, ...] = ()
    """The scores files read, by name (`user.jsonl`), sorted."""
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Metric name → the meta file of the scores file it comes from (empty when that file has none): a judge's names
    its preset and model, which `rollout.report.browsecomp_leaderboard` reads."""

    def of(self, key: TaskKey) -> TaskMetrics:
        """One task's extra metrics, every name present (None where a file has no value for it)."""
        values = self.tasks.get(key, {})
        return {m: values.get(m) for m in self.metrics}


def scores_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / SCORES_DIR


def scores_path(run_dir: Path | str, name: str) -> Path:
    return scores_dir(run_dir) / f"{name}.jsonl"


def _number(value: Any, where: str, metric: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ReportError(f"{where}: metric {metric!r} is {value!r}; a scores file holds numbers or null")
    return float(value)


def write_scores(run_dir: Path | str, name: str, rows: Iterable[ScoreRow | Mapping[str, Any]],
                 meta: Mapping[str, Any] | None = None) -> Path:
    """Write `scores/NAME.jsonl` whole (through a temporary file: a reader never sees half of it), and
    `scores/NAME.meta.json` when `meta` is given. A row is a `ScoreRow` or its JSON (`{"id", "repeat",
    "metrics"}`). Returns the scores file's path."""
    if not name or "/" in name or name.startswith("."):
        raise ReportError(f"scores file name {name!r}: use a plain name such as 'user' or 'judge'")
    path = scores_path(run_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:  # rows may be computed as they are written: a failure leaves the old file as it was
                if not isinstance(row, ScoreRow):
                    row = ScoreRow(str(row["id"]), int(row.get("repeat", 0)), dict(row["metrics"]))
                for metric, value in row.metrics.items():
                    _number(value, f"{path} ({row.id}, repeat {row.repeat})", metric)
                f.write(json.dumps(row.to_json()) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if meta is not None:
        write_json(path.with_name(f"{name}.meta.json"), dict(meta))
    return path


def _meta(path: Path) -> dict[str, Any]:
    meta = read_json(path.with_name(path.name.removesuffix(".jsonl") + ".meta.json"))
    return dict(meta) if isinstance(meta, dict) else {}


def _read_file(path: Path) -> tuple[dict[TaskKey, TaskMetrics], list[str]]:
    tasks: dict[TaskKey, TaskMetrics] = {}
    names: dict[str, None] = {}
    for lineno, row, problem in iter_json_lines(path):
        where = f"{path}:{lineno}"
        if row is None:
            raise ReportError(f"{where}: {problem}; each line is "
                              '{"id": ..., "repeat": 0, "metrics": {"name": number or null}}')
        metrics = row.get("metrics")
        if "id" not in row or not isinstance(metrics, dict):
            raise ReportError(f'{where}: a line needs "id" and an object "metrics", e.g. '
                              '{"id": "q1", "repeat": 0, "metrics": {"judge_correct": 1.0}}')
        key = (str(row["id"]), int(row.get("repeat", 0)))
        values = {str(m): _number(v, where, str(m)) for m, v in metrics.items()}
        names.update(dict.fromkeys(values))
        tasks[key] = values  # a later line for the task replaces the earlier one
    return tasks, list(names)


def read_scores(run_dir: Path | str) -> ExtraScores:
    """Every `scores/*.jsonl` of the run, merged (empty when it has none). A metric named by two files, or by a
    file and the built-in metrics, is a `ReportError` naming both."""
    folder = scores_dir(run_dir)
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    tasks: dict[TaskKey, TaskMetrics] = {}
    owner: dict[str, Path] = {}
    sources: dict[str, str] = {}
    metas: dict[str, dict[str, Any]] = {}
    for path in files:
        per_task, names = _read_file(path)
        meta = _meta(path)
        for m in names:
            if m in BUILTIN_METRICS:
                raise ReportError(f"{path}: metric {m!r} is a built-in metric of every run; rename it in that "
                                  "file (e.g. judge_" + m + ")")
            if m in owner:
                raise ReportError(f"metric {m!r} is in two scores files, {owner[m]} and {path}; rename it in one "
                                  "of them or delete the stale file")
            owner[m] = path
            sources[m] = str(meta.get("source") or path.stem)
            metas[m] = meta
        for key, values in per_task.items():
            tasks.setdefault(key, {}).update(values)
    return ExtraScores(tasks=tasks, metrics=tuple(owner), sources=sources, files=tuple(p.name for p in files),
                       meta=metas)
