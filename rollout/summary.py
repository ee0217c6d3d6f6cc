"""A run's evaluation summary as typed records: what evaluation_summary.json holds.

`rollout.report.scoring.summarize` builds a `RunSummary`; `rollout.run_folder` writes it (`to_json`,
the file's keys in the order it has always had them) and reads it back (`from_json`, which also
reads the files of versions that recorded less). Nothing heavy is imported: the run folder's
readers load this too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.accounting import RunAccounting
from rollout.benchmark_scores import BrowseCompPlusScores, Calibration
from rollout.codec import JsonRecord
from rollout.repetition import Repetition

BUILTIN_METRICS = ("exact_match", "f1", "contains_answer", "retrieval_recall")
"""The metrics every run has, in display order (`rollout.report.scoring` computes them)."""

Metrics = dict[str, float | None]
"""Mean of each metric over some scored records (None without any): the built-in ones
(`rollout.report.scoring.METRICS`), then the run's extra metrics (`rollout.report.extra_scores`)."""


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
    pass_at_k_by_metric: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """The same for each extra metric whose every value is 0 or 1 (e.g. `judge_correct`): metric → k → pass@k.
    Empty (and absent from the file) when there is none."""

    def to_json(self) -> dict[str, Any]:
        data = {
            "by_repeat": _groups_to_json(self.by_repeat),
            "ci95": {m: None if ci is None else list(ci) for m, ci in self.ci95.items()},
            "pass_at_k": dict(self.pass_at_k),
        }
        if self.pass_at_k_by_metric:
            data["pass_at_k_by_metric"] = {m: dict(at_k) for m, at_k in self.pass_at_k_by_metric.items()}
        return data


@dataclass(frozen=True, slots=True)
class ScoringSettings(JsonRecord):
    """How the run was scored beyond the built-in metrics: recorded in the summary, not in the run's identity
    (rescoring is not rerunning)."""

    scorers: list[str] = field(default_factory=list)
    """The run's own scorers (`scoring.scorers`), as configured."""
    score_files: list[str] = field(default_factory=list)
    """The scores files read (`scores/*.jsonl`), by name."""
    extra_metrics: dict[str, str] = field(default_factory=dict)
    """Each extra metric, in display order, → its source (a scores file's meta `source`, else its name)."""


@dataclass(frozen=True, slots=True)
class EndpointLoad(JsonRecord):
    """How the LLM endpoint served a run's timed requests (`rollout.report.endpoint`)."""

    requests: int
    """Requests measured: the agents' answered LLM requests whose records carry their timings."""
    sent_at_once: int
    """The most of them in flight together, as the client saw them."""
    served_at_once: float | None
    """The most the server worked on together: exact (a whole number) when `timed_by_server`, else estimated from
    throughput (one decimal); None when no request reported completion tokens."""
    timed_by_server: bool = False
    """Whether every request carried the server's own timings, which make `served_at_once` exact and
    `queued_share` known (False in files written before it was kept)."""
    completion_tokens_per_s: float | None = None
    """Completion tokens over the time at least one request was in flight; None without usage."""
    queued_share: float | None = None
    """Share of the requests' time spent outside the server's own (queued, or on the wire); None without the
    server's timings."""


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
    truncated: int
    """Records whose answer was cut at the model's token limit (`TaskResult.truncated`). They have status ok, so
    they are all among `scored`: of the scored answers, this many are the model's answer cut, not just wrong."""
    out_of_turns: int
    """Records whose agent used all its turns without answering (`TaskResult.out_of_turns`), all among `scored`."""
    out_of_context: int
    """Records whose conversation outgrew the model's context window (`TaskResult.out_of_context`), all among
    `scored`: the agent's limit is its outcome, scored as the answer it had (usually none)."""
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
    accounting: RunAccounting | None = None
    """Where the tasks' time and tokens went; None when no record carries accounting (runs written before it)."""
    degraded_tools: dict[str, str] = field(default_factory=dict)
    """Name → reason of the tools the agent was offered in a degraded form (`rollout.wire.META_DEGRADED`: an
    upstream tool served without its parameters' schema); empty when none was, or in files written before."""
    tools_offered: int | None = None
    """How many tools the run offered the agent (None when not known: files written before it was kept)."""
    warnings: list[str] = field(default_factory=list)
    """What makes the numbers mean less than they seem, one sentence each with its fix: tasks out of context, tools
    offered and never called."""
    calibration: Calibration | None = None
    """When some scored answer states its confidence (`Confidence: 85%`)."""
    browsecomp_plus: BrowseCompPlusScores | None = None
    """BrowseComp-Plus' leaderboard numbers, for a run whose questions carry `evidence_doc_ids` or whose agent called
    its tools (`rollout.report.browsecomp_leaderboard`); None for any other run."""
    scoring: ScoringSettings = field(default_factory=ScoringSettings)
    """Scorers and scores files behind the extra metrics; empty in files written before they existed."""
    llm_endpoint: EndpointLoad | None = None
    """How the LLM endpoint served the agents' requests (`rollout.report.endpoint`); None when no record carries
    timed requests (offline agents, files written before)."""
    unfinished_calls: dict[str, ToolUse] = field(default_factory=dict)
    """Tool calls of the tasks that had not finished when the run was interrupted, per tool name (sorted), counted
    from the gateway's ledger (`rollout.report.unfinished`): they reached the gateway, and no record holds them.
    Empty for a run that was not interrupted (and in files written before)."""
    repeated_calls: Repetition | None = None
    """Tool calls repeating an earlier call of their task, and turns repeating the one before
    (`rollout.repetition`); None in files written before they were counted."""

    @property
    def extra_metrics(self) -> list[str]:
        """The metrics beyond the built-in ones, in display order."""
        return list(self.scoring.extra_metrics) or [m for m in self.metrics if m not in BUILTIN_METRICS]

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
            "truncated": self.truncated,
            "out_of_turns": self.out_of_turns,
            "out_of_context": self.out_of_context,
            "repeats": self.repeats,
            "deterministic_agent": self.deterministic_agent,
            "tool_calls": {name: {"calls": t.calls, "failed": t.failed} for name, t in self.tool_calls.items()},
            "tool_calls_per_task": self.tool_calls_per_task,
            "wall_time_s": self.wall_time_s,
            "degraded_tools": dict(self.degraded_tools),
            "tools_offered": self.tools_offered,
            "warnings": list(self.warnings),
        }
        if self.repeat_stats is not None:
            data |= self.repeat_stats.to_json()
        if self.tokens is not None:
            data["tokens"] = self.tokens.to_json()
        if self.by_hops is not None:
            data["by_hops"] = _groups_to_json(self.by_hops)
        if self.by_style is not None:
            data["by_style"] = _groups_to_json(self.by_style)
        if self.accounting is not None:
            data["accounting"] = self.accounting.to_json()
        if self.calibration is not None:
            data["calibration"] = self.calibration.to_json()
        if self.browsecomp_plus is not None:
            data["browsecomp_plus"] = self.browsecomp_plus.to_json()
        data["scoring"] = self.scoring.to_json()
        if self.llm_endpoint is not None:
            data["llm_endpoint"] = self.llm_endpoint.to_json()
        if self.unfinished_calls:
            data["unfinished_tool_calls"] = {name: {"calls": t.calls, "failed": t.failed}
                                             for name, t in self.unfinished_calls.items()}
        if self.repeated_calls is not None:
            data["repeated_calls"] = self.repeated_calls.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary file, this version's or an older one's.

        Files written before task statuses existed have no `scored`, `statuses`, `score_failed`,
        `repeats` or `deterministic_agent`: every record was scored then, and its `errors` and
        `timeouts` counts are the only statuses it knows (the rest were ok). Files written before
        accounting have no `accounting`, before finish reasons were kept no `truncated` (read as 0), before
        degraded tools were listed no `degraded_tools`, nor, before tagged agents, `out_of_turns`; before extra metrics
        no `scoring`, `calibration` or `pass_at_k_by_metric`; before context windows were outcomes no `out_of_context`,
        `tools_offered` or `warnings`; before requests were timed no `llm_endpoint`, nor, before interrupted runs
        counted the gateway's ledger, `unfinished_tool_calls`."""
        n = int(data["n"])
        errors, timeouts = int(data.get("errors", 0)), int(data.get("timeouts", 0))
        statuses = data.get("statuses") or {"ok": n - errors - timeouts, "error": errors, "timeout": timeouts}
        tokens = data.get("tokens")
        accounting = data.get("accounting")
        return cls(
            n=n,
            scored=int(data.get("scored", n)),
            metrics=dict(data["metrics"]),
            mode=str(data["mode"]),
            gateway_file=str(data["gateway_file"]),
            complete=bool(data.get("complete", True)),
            score_failed=bool(data.get("score_failed", False)),
            statuses={str(k): int(v) for k, v in statuses.items()},
            truncated=int(data.get("truncated", 0)),
            out_of_turns=int(data.get("out_of_turns", 0)),
            out_of_context=int(data.get("out_of_context", 0)),
            repeats=int(data.get("repeats", 1 if n else 0)),
            deterministic_agent=data.get("deterministic_agent"),
            tool_calls={name: ToolUse(int(t["calls"]), int(t["failed"])) for name, t in data["tool_calls"].items()},
            tool_calls_per_task=float(data["tool_calls_per_task"]),
            wall_time_s=float(data["wall_time_s"]),
            repeat_stats=None if "by_repeat" not in data else RepeatStats(
                by_repeat=_groups_from_json(data["by_repeat"]) or {},
                ci95={m: None if ci is None else (float(ci[0]), float(ci[1])) for m, ci in data["ci95"].items()},
                pass_at_k=dict(data["pass_at_k"]),
                pass_at_k_by_metric={str(m): dict(at_k) for m, at_k in (data.get("pass_at_k_by_metric") or {}).items()},
            ),
            tokens=None if tokens is None else TokenUse(int(tokens["total"]), float(tokens["per_task"]),
                                                        tokens.get("cost_usd")),
            by_hops=_groups_from_json(data.get("by_hops")),
            by_style=_groups_from_json(data.get("by_style")),
            accounting=None if accounting is None else RunAccounting.from_json(accounting),
            degraded_tools={str(k): str(v) for k, v in (data.get("degraded_tools") or {}).items()},
            tools_offered=data.get("tools_offered"),
            warnings=[str(w) for w in data.get("warnings") or []],
            calibration=None if data.get("calibration") is None else Calibration.from_json(data["calibration"]),
            browsecomp_plus=None if data.get("browsecomp_plus") is None
            else BrowseCompPlusScores.from_json(data["browsecomp_plus"]),
            scoring=ScoringSettings.from_json(data.get("scoring") or {}),
            llm_endpoint=None if data.get("llm_endpoint") is None else EndpointLoad.from_json(data["llm_endpoint"]),
            unfinished_calls={name: ToolUse(int(t["calls"]), int(t["failed"]))
                              for name, t in (data.get("unfinished_tool_calls") or {}).items()},
            repeated_calls=Repetition.from_json(data.get("repeated_calls")),
        )
