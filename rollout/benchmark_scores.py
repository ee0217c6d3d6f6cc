"""The summary's records of scores beyond the answers' match: calibration (stated confidences against how often they
are right) and BrowseComp-Plus' own numbers (judged accuracy, evidence recall, search calls, calibration error)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.codec import JsonRecord


@dataclass(frozen=True, slots=True)
class CalibrationBin(JsonRecord):
    """The records whose stated confidence falls in [low, high) (the last bin holds 1.0 too)."""

    low: float
    high: float
    n: int
    confidence: float
    """Mean stated confidence, 0 to 1."""
    accuracy: float
    """Mean correctness."""


@dataclass(frozen=True, slots=True)
class Calibration(JsonRecord):
    """How well the confidences the answers state match how often they are right (`rollout.report.calibration`)."""

    n: int
    """Scored records whose final message states a confidence (and whose correctness is known)."""
    error: float
    """Expected calibration error: over 10 equal bins of [0, 1], the sum of (bin size / n) * |mean confidence -
    accuracy|; 0 is perfect, 1 the worst."""
    correct_by: str
    """The metric that says whether an answer is right: `judge_correct` when a scores file provides it, else
    `exact_match`."""
    confidence: float
    """Mean stated confidence over the n records."""
    accuracy: float
    """Mean correctness over them."""
    bins: list[CalibrationBin] = field(default_factory=list)
    """The bins that hold records, low to high."""
    browsecomp_plus_error: float | None = None
    """BrowseComp-Plus' calibration error (root mean square over bins of 100 answers sorted by confidence; see
    `rollout.report.calibration`), comparable with its leaderboard's once multiplied by 100; None under 100 answers."""


BROWSECOMP_PLUS_NAMES = {
    "accuracy": "Accuracy (%)", "evidence_recall": "Recall (%)", "gold_recall": "Gold Recall (%)",
    "search_calls": "Search Calls", "get_document_calls": "Get Document Calls",
    "citation_precision": "Citation Precision (%)", "citation_recall": "Citation Recall (%)",
    "calibration_error": "Calibration Error (%)",
}
"""Each BrowseComp-Plus number → its name in evaluation_summary.json and on screen: its leaderboard's names where it
has one (Accuracy, Recall of the evidence documents, Search Calls, Calibration Error), else in their style."""


@dataclass(frozen=True, slots=True)
class BrowseCompPlusScores:
    """BrowseComp-Plus' leaderboard numbers over a run's scored records, as its evaluator computes them
    (`rollout.report.browsecomp_leaderboard`); percents in [0, 100] as its leaderboard shows them, rounded as it
    rounds them."""

    queries: int
    """Records counted: the run's scored ones."""
    answered: int
    """Of them, those its evaluator judges: status "completed" (`rollout.report.browsecomp_leaderboard.run_status`)
    and a final response that is not empty. The others count as wrong answers."""
    judged: int
    """Of the answered ones, those with a verdict of the judge below (a reply it could not read counts as wrong)."""
    judge_preset: str | None
    """The preset of the run's judge (`scores/judge.meta.json`); Accuracy needs `browsecomp_plus`."""
    judge_model: str | None
    """The model of that judge."""
    accuracy: float | None
    """Answers the `browsecomp_plus` judge found correct, of the queries; None without its verdicts."""
    evidence_recall: float | None
    """Mean over the queries with evidence documents of the share of them among the docids its searches returned."""
    gold_recall: float | None
    """The same against the gold documents."""
    search_calls: float | None
    """Calls of the search tools (`search`, `search_bm25`, `search_dense`) per query."""
    get_document_calls: float | None
    """Calls of `get_document` per query."""
    calls_per_query: dict[str, float]
    """Calls per query of each tool the agent called, by name (sorted)."""
    citation_precision: float | None
    """Mean over the answered queries citing a docid of the share of their cited docids that are evidence."""
    citation_recall: float | None
    """Mean over the same queries of the share of their evidence documents they cite."""
    with_citations: int
    """Answered queries citing at least one docid."""
    calibration_error: float | None
    """BrowseComp-Plus' calibration error over the judged answers; None under 100 of them."""

    def to_json(self) -> dict[str, Any]:
        numbers = {BROWSECOMP_PLUS_NAMES[k]: getattr(self, k) for k in BROWSECOMP_PLUS_NAMES}
        return {"queries": self.queries, "answered": self.answered, "judged": self.judged,
                "judge": None if self.judge_preset is None else {"preset": self.judge_preset,
                                                                  "model": self.judge_model},
                **numbers, "calls_per_query": dict(self.calls_per_query), "with_citations": self.with_citations}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrowseCompPlusScores:
        judge = data.get("judge") or {}
        return cls(queries=int(data["queries"]), answered=int(data["answered"]), judged=int(data["judged"]),
                   judge_preset=judge.get("preset"), judge_model=judge.get("model"),
                   **{k: data.get(name) for k, name in BROWSECOMP_PLUS_NAMES.items()},
                   calls_per_query={str(k): float(v) for k, v in (data.get("calls_per_query") or {}).items()},
                   with_citations=int(data.get("with_citations", 0)))
