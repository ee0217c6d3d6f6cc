"""A judge's files in a run folder: its verdicts, its description and usage, and the scores file it leaves.

```
judgements/<judge-key>.jsonl   one `JudgeRecord` per line, appended as verdicts arrive; the last line of a
                               task (id, repeat) is its verdict. Every judge keeps its own file.
judgements/<judge-key>.json    the judge (endpoint, model, preset, prompt hash, sampling, source) and its
                               usage: tokens, cost and latency, apart from the agent's
scores/judge.jsonl             {"id", "repeat", "metrics": {...}} per scored task, by the latest judging
scores/judge.meta.json         {"source": "judge", "judge_key", "preset", "model"} of that judging
```
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rollout.codec import JsonRecord
from rollout.jsonl import iter_jsonl
from rollout.records import TaskKey
from rollout.report import extra_scores
from rollout.report.judge.grader import JudgeRecord, JudgeSettings
from rollout.run_folder import write_json

JUDGEMENTS_DIR = "judgements"
SCORES_NAME = "judge"
"""`scores/judge.jsonl`: the metrics seam every report reads beside exact match."""

logger = logging.getLogger(__name__)


def verdicts_path(run_dir: Path, key: str) -> Path:
    return run_dir / JUDGEMENTS_DIR / f"{key}.jsonl"


def description_path(run_dir: Path, key: str) -> Path:
    return run_dir / JUDGEMENTS_DIR / f"{key}.json"


def scores_path(run_dir: Path) -> Path:
    return extra_scores.scores_path(run_dir, SCORES_NAME)


def read_verdicts(path: Path) -> dict[TaskKey, JudgeRecord]:
    """The verdict of each task in a verdicts file (its last line); unreadable lines are skipped with a warning."""
    verdicts: dict[TaskKey, JudgeRecord] = {}
    for data in iter_jsonl(path):
        try:
            record = JudgeRecord.from_json(data)
        except (TypeError, ValueError) as e:  # a missing field or a value of another type (pydantic's ValueError)
            logger.warning("%s: a verdict line of another shape skipped (%s)", path, e)
            continue
        verdicts[record.key] = record
    return verdicts


class VerdictsFile:
    """The judge's verdicts file, appended to verdict by verdict and made by the first: a judging that fails before
    any verdict (a dead judge) leaves no empty file in the run folder, and one that fails later keeps the verdicts it
    got, which are real."""

    def __init__(self, run_dir: Path, key: str) -> None:
        self.path = verdicts_path(run_dir, key)
        self._file: IO[str] | None = None

    def append(self, record: JudgeRecord) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record.to_json()) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> VerdictsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class JudgeUsage(JsonRecord):
    """What a judge's verdicts on one run cost, counted apart from the agent's usage."""

    verdicts: int
    """Verdicts held (replies, parsed or not)."""
    requests: int
    """HTTP requests made for them, retries included."""
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None
    """None when the judge's prices are not configured."""
    latency_ms_mean: float | None
    latency_ms_p95: float | None

    @classmethod
    def of(cls, records: Iterable[JudgeRecord]) -> JudgeUsage:
        held = [r for r in records if r.error is None]
        tokens = {k: int(sum(r.usage.get(k, 0) for r in held)) for k in
                  ("prompt_tokens", "completion_tokens", "total_tokens")}
        costs = [r.usage["cost_usd"] for r in held if "cost_usd" in r.usage]
        latency = np.asarray([r.latency_ms for r in held], dtype=np.float64)
        return cls(len(held), sum(r.attempts for r in held), **tokens, cost_usd=float(sum(costs)) if costs else None,
                   latency_ms_mean=float(latency.mean()) if len(latency) else None,
                   latency_ms_p95=float(np.percentile(latency, 95)) if len(latency) else None)



def write_description(run_dir: Path, settings: JudgeSettings, usage: JudgeUsage) -> Path:
    return write_json(description_path(run_dir, settings.key), {**settings.describe(), "usage": usage.to_json()})


def write_scores(run_dir: Path, rows: Iterable[Mapping[str, Any]], settings: JudgeSettings) -> Path:
    """Replace `scores/judge.jsonl` (a reader sees the old file or the new one) and its meta file naming the judge."""
    return extra_scores.write_scores(run_dir, SCORES_NAME, rows, meta={
        "source": "judge", "judge_key": settings.key, "preset": settings.preset.name, "model": settings.llm.model})
