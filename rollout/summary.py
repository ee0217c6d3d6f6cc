"""A run's evaluation summary as typed records: what evaluation_summary.json holds.

`rollout.report.scoring.summarize` builds a `RunSummary`; `rollout.run_folder` writes it (`to_json`,
the file's keys in the order it has always had them) and reads it back (`from_json`, which also
reads the files of versions that recorded less). Nothing heavy is imported: the run folder's
readers load this too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Metrics = dict[str, float | None]
"""Mean of each metric (`rollout.report.scoring.METRICS`) over some scored records; None without any."""


@dataclass(frozen=True, slots=True)
class GroupScores:
    """The metrics of one slice of the scored records: a repeat, a hop count or a question style."""

    n: int
    """Scored records in the slice."""
    metrics: Metrics

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, **self.metrics}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GroupScores:
        return cls(int(data["n"]), {k: v for k, v in data.items() if k != "n"})


def _groups_to_json(groups: dict[str, GroupScores]) -> dict[str, Any]:
    return {k: g.to_json() for k, g in groups.items()}


def _groups_from_json(data: Mapping[str, Any] | None) -> dict[str, GroupScores] | None:
    return None if data is None else {str(k): GroupScores.from_json(g) for k, g in data.items()}


@dataclass(frozen=True, slots=True)
class ToolUse:
    """How often one tool was called over the run's records, and how many of those calls failed."""

    calls: int
    failed: int


@dataclass(frozen=True, slots=True)
class TokenUse:
    """Tokens of the records that report usage."""

    total: int
    per_task: float
    cost_usd: float | None = None
    """Summed cost; None (and absent from the file) when no record was priced."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"total": self.total, "per_task": self.per_task}
        if self.cost_usd is not None:
            data["cost_usd"] = self.cost_usd
        return data


@dataclass(frozen=True, slots=True)
class RepeatStats:
    """What a run with more than one repeat adds (see `rollout.report.scoring`)."""

    by_repeat: dict[str, GroupScores]
    """Metrics of each repeat's scored records, keyed by the repeat ("0", "1", ...)."""
    ci95: dict[str, tuple[float, float] | None]
    """Per metric, the 95% Student-t interval over the repeats' means (None when it has no value)."""
    pass_at_k: dict[str, float | None]
    """Unbiased pass@k on exact match, keyed by k ("1" .. repeats)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "by_repeat": _groups_to_json(self.by_repeat),
            "ci95": {m: None if ci is None else list(ci) for m, ci in self.ci95.items()},
            "pass_at_k": dict(self.pass_at_k),
        }


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The evaluation summary of one run's records."""

    n: int
    """Records (question, repeat) summarised."""
    scored: int
    """Records that entered the metrics (status ok, or every one with `score_failed`)."""
    metrics: Metrics
    """Mean of each metric over the scored records."""
    mode: str
    gateway_file: str
    complete: bool
    """False when the run was interrupted before every task finished."""
    score_failed: bool
    """Whether failed records were scored as wrong answers instead of being left out."""
    statuses: dict[str, int]
    """Records per task status: every known status, then any other met."""
    repeats: int
    """Highest repeat + 1 (0 without records)."""
    deterministic_agent: bool | None
    """As the agent declared it (None when it did not say)."""
    tool_calls: dict[str, ToolUse]
    """Per tool name, sorted by name."""
    tool_calls_per_task: float
    wall_time_s: float
    repeat_stats: RepeatStats | None = None
    """With more than one repeat and something scored."""
    tokens: TokenUse | None = None
    """When some record reports token usage."""
    by_hops: dict[str, GroupScores] | None = None
    """When some scored record's question has `hops` in its metadata."""
    by_style: dict[str, GroupScores] | None = None
    """When some scored record's question has a `style`."""

    @property
    def errors(self) -> int:
        return self.statuses.get("error", 0)

    @property
    def timeouts(self) -> int:
        return self.statuses.get("timeout", 0)

    @property
    def infra_errors(self) -> int:
        return self.statuses.get("infra_error", 0)

    def to_json(self) -> dict[str, Any]:
        """The content of evaluation_summary.json."""
        data: dict[str, Any] = {
            "n": self.n,
            "scored": self.scored,
            "metrics": dict(self.metrics),
            "mode": self.mode,
            "gateway_file": self.gateway_file,
            "complete": self.complete,
            "score_failed": self.score_failed,
            "statuses": dict(self.statuses),
            "errors": self.errors,
            "timeouts": self.timeouts,
            "repeats": self.repeats,
            "deterministic_agent": self.deterministic_agent,
            "tool_calls": {name: {"calls": t.calls, "failed": t.failed} for name, t in self.tool_calls.items()},
            "tool_calls_per_task": self.tool_calls_per_task,
            "wall_time_s": self.wall_time_s,
        }
        if self.repeat_stats is not None:
            data |= self.repeat_stats.to_json()
        if self.tokens is not None:
            data["tokens"] = self.tokens.to_json()
        if self.by_hops is not None:
            data["by_hops"] = _groups_to_json(self.by_hops)
        if self.by_style is not None:
            data["by_style"] = _groups_to_json(self.by_style)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary file, this version's or an older one's.

        Files written before task statuses existed have no `scored`, `statuses`, `score_failed`,
        `repeats` or `deterministic_agent`: every record was scored then, and its `errors` and
        `timeouts` counts are the only statuses it knows (the rest were ok)."""
        n = int(data["n"])
        errors, timeouts = int(data.get("errors", 0)), int(data.get("timeouts", 0))
        statuses = data.get("statuses") or {"ok": n - errors - timeouts, "error": errors, "timeout": timeouts}
        tokens = data.get("tokens")
        return cls(
            n=n,
            scored=int(data.get("scored", n)),
            metrics=dict(data["metrics"]),
            mode=str(data["mode"]),
            gateway_file=str(data["gateway_file"]),
            complete=bool(data.get("complete", True)),
            score_failed=bool(data.get("score_failed", False)),
            statuses={str(k): int(v) for k, v in statuses.items()},
            repeats=int(data.get("repeats", 1 if n else 0)),
            deterministic_agent=data.get("deterministic_agent"),
            tool_calls={name: ToolUse(int(t["calls"]), int(t["failed"])) for name, t in data["tool_calls"].items()},
            tool_calls_per_task=float(data["tool_calls_per_task"]),
            wall_time_s=float(data["wall_time_s"]),
            repeat_stats=None if "by_repeat" not in data else RepeatStats(
                by_repeat=_groups_from_json(data["by_repeat"]) or {},
                ci95={m: None if ci is None else (float(ci[0]), float(ci[1])) for m, ci in data["ci95"].items()},
                pass_at_k=dict(data["pass_at_k"]),
            ),
            tokens=None if tokens is None else TokenUse(int(tokens["total"]), float(tokens["per_task"]),
                                                        tokens.get("cost_usd")),
            by_hops=_groups_from_json(data.get("by_hops")),
            by_style=_groups_from_json(data.get("by_style")),
        )
