"""BrowseComp-Plus' leaderboard numbers from a run's task records, computed as its own evaluator computes them.

texttron/BrowseComp-Plus judges a run (one JSON file per query) with `scripts_evaluation/evaluate_run.py` (commit
97c637c). Read record by record, as that script reads a run file (`rollout.export.browsecomp_run` writes those files):

- **status**: "completed" for a task that ended `ok` with its answer whole; anything else is a failure
  (`run_status`): a failed task (error, timeout, infra_error: never an answer), an answer cut at the token limit
  (its README's own example of a failure), an agent out of turns or out of context (the agent's outcome). Its
  evaluator judges only completed runs whose final response is not empty; every other one counts as a wrong answer.
- **response**: the agent's final message, as rollout's judge reads it (`final_response`).
- **retrieved docids**: the union of the docids every search call returned (`search`, `search_bm25`,
  `search_dense`: their `result_doc_ids`); `get_document` retrieves nothing, as there.
- **Recall (%)**: of a query's evidence documents (`metadata.evidence_doc_ids`), the share among its retrieved
  docids, averaged over the queries that have evidence documents; **Gold Recall (%)** the same for
  `metadata.gold_doc_ids`.
- **Search Calls**: calls of the search tools per query; **Get Document Calls** likewise; per tool in
  `calls_per_query` (`search_bm25` and `search_dense` apart in `mode=bcp_both`).
- **Citation Precision / Recall (%)**: the docids an answered response cites (`cited_docids`: every run of digits
  inside `[...]` or `【...】`, as its `extract_citations_from_response` reads them) against the evidence documents:
  precision = cited evidence / cited, recall = cited evidence / evidence (0 without evidence documents), each
  averaged over the answered queries that cite at least one docid.
- **Accuracy (%)**: answered queries the `browsecomp_plus` judge (`rollout report judge --preset browsecomp_plus`,
  the prompt of that script) found correct, of every query counted; a reply the judge wrote that could not be read
  counts as wrong, as there. None when the run has no verdicts of that judge.
- **Calibration Error (%)**: `rollout.report.calibration.browsecomp_plus_error` over the judged answers whose judge
  read a confidence (one it read none from is left out, as there, whatever the answer states); None under 100 of
  them, where that script writes 0.

Which records: in a run's summary and in `report compare`, the records the run scores (status ok, or every one with
`score_failed`), as every other metric of the summary; a failed task is never an answer. The export counts every
question, as that script counts every file.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rollout.benchmark_scores import BROWSECOMP_PLUS_NAMES, BrowseCompPlusScores
from rollout.records import TaskResult
from rollout.report.calibration import browsecomp_plus_error
from rollout.report.extra_scores import ExtraScores
from rollout.report.judge.presets import JUDGE_CONFIDENCE, JUDGE_CORRECT

SEARCH_TOOLS = ("search", "search_bm25", "search_dense")
"""BrowseComp-Plus' search tools as rollout's modes name them (`bcp_bm25`, `bcp_dense`: `search`; `bcp_both`: one
per retriever)."""
GET_DOCUMENT = "get_document"
TOOLS = (*SEARCH_TOOLS, GET_DOCUMENT)
COMPLETED = "completed"
"""The one status its evaluator judges."""
JUDGE_PRESET = "browsecomp_plus"
"""The judge whose verdicts give Accuracy: the prompt its leaderboard is judged with."""
EVIDENCE = "evidence_doc_ids"
GOLD = "gold_doc_ids"

# `extract_citations_from_response`: [docid] or [docid1, docid2, ...], and the full-width brackets gpt-oss writes.
_SINGLE = re.compile(r"\[(\d+)\]")
_MULTI = re.compile(r"\[([^\[\]]*?)\]")
_SINGLE_FULLWIDTH = re.compile(r"【(\d+)】")
_MULTI_FULLWIDTH = re.compile(r"【([^【】]*?)】")
_DIGITS = re.compile(r"\d+")


def final_response(task: TaskResult) -> str:
    """The agent's final message (the last assistant message with text), else its prediction: what rollout's
    `browsecomp_plus` judge reads (`rollout.report.judge.grader.judged_text` calls this), so citations and verdict are of
    one text."""
    for message in reversed(task.messages):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str) and message["content"]:
            return message["content"]
    return task.prediction


def run_status(task: TaskResult) -> str:
    """The run file's `status`: "completed", or what kept the task from completing."""
    if task.status != "ok":
        return f"{task.status}: {task.error}" if task.error else task.status
    if task.out_of_context:
        return "incomplete: out of the model's context window"
    if task.out_of_turns:
        return "incomplete: out of turns (agent.max_turns)"
    if task.truncated:
        return "incomplete: answer cut at the model's token limit"
    return COMPLETED


def retrieved_docids(task: TaskResult) -> list[str]:
    """The union of the docids the task's search calls returned, sorted."""
    return sorted({d for c in task.tool_calls if c.name in SEARCH_TOOLS for d in c.result_doc_ids})


def cited_docids(text: str) -> list[str]:
    """The docids a response cites, sorted: every `[docid]` and `【docid】`, and every run of digits inside any other
    pair of brackets (`[12, 34]`), as BrowseComp-Plus' `extract_citations_from_response` reads them; so `[2024]`
    cites 2024 there too."""
    if not text:
        return []
    single, single_fullwidth = _SINGLE.findall(text), _SINGLE_FULLWIDTH.findall(text)
    found = {*single, *single_fullwidth}
    for matches, singles in ((_MULTI.findall(text), single), (_MULTI_FULLWIDTH.findall(text), single_fullwidth)):
        for match in matches:
            if match not in singles:
                found.update(_DIGITS.findall(match))
    return sorted(found)


def share_found(found: Iterable[str], wanted: Iterable[str]) -> float | None:
    """The share of `wanted` among `found` (None when nothing is wanted)."""
    wanted = set(wanted)
    return len(wanted & set(found)) / len(wanted) if wanted else None


def tool_call_counts(task: TaskResult) -> dict[str, int]:
    """Calls per tool name, in the order first called."""
    return dict(Counter(c.name for c in task.tool_calls))


def doc_ids(metadata: Mapping[str, object], key: str) -> list[str]:
    """A question's judged docids (`evidence_doc_ids` or `gold_doc_ids`) as strings; none when it has none."""
    value = metadata.get(key)
    return [str(d) for d in value] if isinstance(value, list | tuple) else []


@dataclass(frozen=True, slots=True)
class QueryRun:
    """One record as BrowseComp-Plus' evaluator reads its run file, and what it finds in it."""

    query_id: str
    status: str
    """`run_status`."""
    response: str
    """`final_response`."""
    retrieved_docids: list[str]
    tool_call_counts: dict[str, int]
    evidence_recall: float | None
    """Share of the evidence documents retrieved (None without evidence documents)."""
    gold_recall: float | None
    cited_docids: list[str]
    """The docids the response cites; empty unless it is answered."""
    correct: bool | None
    """The `browsecomp_plus` judge found it correct; False when not answered or its verdict is missing or unread;
    None without that judge."""
    judged: bool
    """Answered, with a verdict of the judge."""
    confidence: float | None
    """Of a judged answer, 0 to 1, as the judge read it (None when it read none)."""

    @property
    def answered(self) -> bool:
        """What its evaluator judges: completed, with a response."""
        return self.status == COMPLETED and self.response != ""


def _judge_confidence(metrics: Mapping[str, float | None]) -> float | None:
    # Its evaluator takes the judge's confidence only: an answer it read none from is "missing judge confidence" and
    # left out of the calibration error, never given the confidence the response states.
    value = metrics.get(JUDGE_CONFIDENCE)
    return None if value is None else float(value)


def read_query(task: TaskResult, metrics: Mapping[str, float | None], *, judge_preset: str | None) -> QueryRun:
    """The record as a run file and its evaluation; `metrics` are its extra metrics (`ExtraScores.of`), whose
    `judge_correct` counts when `judge_preset` is `browsecomp_plus`."""
    status, response = run_status(task), final_response(task)
    retrieved = retrieved_docids(task)
    answered = status == COMPLETED and response != ""
    verdict = metrics.get(JUDGE_CORRECT) if judge_preset == JUDGE_PRESET and answered else None
    judged = verdict is not None
    return QueryRun(
        query_id=task.id, status=status, response=response, retrieved_docids=retrieved,
        tool_call_counts=tool_call_counts(task),
        evidence_recall=share_found(retrieved, doc_ids(task.metadata, EVIDENCE)),
        gold_recall=share_found(retrieved, doc_ids(task.metadata, GOLD)),
        cited_docids=cited_docids(response) if answered else [],
        correct=None if judge_preset != JUDGE_PRESET else verdict == 1.0,
        judged=judged,
        confidence=_judge_confidence(metrics) if judged else None,
    )


def citation_scores(cited: list[str], evidence: list[str]) -> tuple[float, float]:
    """(precision, recall) of a response's citations against the evidence documents, as `compute_citation_metrics`:
    recall is 0 without evidence documents."""
    hits = len(set(cited) & set(evidence))
    return hits / len(cited), hits / len(set(evidence)) if evidence else 0.0


def judge_of(extra: ExtraScores) -> tuple[str | None, str | None]:
    """(preset, model) of the judge whose `judge_correct` the run's scores files hold; (None, None) without one."""
    meta = extra.meta.get(JUDGE_CORRECT)
    if meta is None:
        return None, None
    preset, model = meta.get("preset"), meta.get("model")
    return (None if preset is None else str(preset)), (None if model is None else str(model))


class _Mean:
    def __init__(self) -> None:
        self.total = 0.0
        self.n = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.n += 1

    def percent(self) -> float | None:
        return round(100 * self.total / self.n, 2) if self.n else None


class BrowseCompPlusTally:
    """The numbers, added record by record: sums, and 9 bytes per judged answer for the calibration error."""

    def __init__(self, judge: tuple[str | None, str | None] = (None, None), *, always: bool = False) -> None:
        self.judge_preset, self.judge_model = judge
        self.present = always
        """Some record's question carries evidence documents, or its agent called BrowseComp-Plus' tools (or the
        numbers are asked for whatever the run: `always`, as an export in its format asks)."""
        self.queries = self.answered = self.judged = self.correct = 0
        self.calls: Counter[str] = Counter()
        self.evidence, self.gold = _Mean(), _Mean()
        self.precision, self.recall = _Mean(), _Mean()
        self._confidence = array("d")  # float64, as its evaluator's array: ties sort as they sort there
        self._right = array("b")

    def add(self, task: TaskResult, metrics: Mapping[str, float | None], *, counted: bool = True) -> QueryRun | None:
        """One record; `counted` says whether it enters the numbers (a record the run does not score does not).
        Returns how the evaluator reads it, when counted."""
        self.present = self.present or EVIDENCE in task.metadata or any(c.name in TOOLS for c in task.tool_calls)
        if not counted:
            return None
        query = read_query(task, metrics, judge_preset=self.judge_preset)
        self.queries += 1
        self.calls.update(query.tool_call_counts)
        self.evidence.add(query.evidence_recall)
        self.gold.add(query.gold_recall)
        self.answered += query.answered
        self.correct += bool(query.correct)
        if query.cited_docids:
            precision, recall = citation_scores(query.cited_docids, doc_ids(task.metadata, EVIDENCE))
            self.precision.add(precision)
            self.recall.add(recall)
        if query.judged:
            self.judged += 1
            if query.confidence is not None:
                self._confidence.append(query.confidence)
                self._right.append(1 if query.correct else 0)
        return query

    def per_query(self, tools: Iterable[str]) -> float | None:
        return round(sum(self.calls[t] for t in tools) / self.queries, 4) if self.queries else None

    def summary(self) -> BrowseCompPlusScores | None:
        """The numbers; None for a run that is not BrowseComp-Plus' (see `present`)."""
        if not self.present:
            return None
        with_judge = self.judge_preset == JUDGE_PRESET
        calibration = browsecomp_plus_error(self._confidence, self._right) if with_judge else None
        return BrowseCompPlusScores(
            queries=self.queries, answered=self.answered, judged=self.judged, judge_preset=self.judge_preset,
            judge_model=self.judge_model,
            accuracy=round(100 * self.correct / self.queries, 2) if with_judge and self.queries else None,
            evidence_recall=self.evidence.percent(), gold_recall=self.gold.percent(),
            search_calls=self.per_query(SEARCH_TOOLS), get_document_calls=self.per_query([GET_DOCUMENT]),
            calls_per_query={t: round(n / self.queries, 4) for t, n in sorted(self.calls.items())},
            citation_precision=self.precision.percent(), citation_recall=self.recall.percent(),
            with_citations=self.precision.n,
            calibration_error=None if calibration is None else round(100 * calibration, 2),
        )


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def search_columns(scores: BrowseCompPlusScores) -> list[str]:
    """The search tools to show apart: those called, when more than one was (`mode=bcp_both`)."""
    called = [t for t in SEARCH_TOOLS if t in scores.calls_per_query]
    return called if len(called) > 1 else []


def leaderboard_cells(scores: BrowseCompPlusScores, split: Iterable[str] = ()) -> dict[str, str]:
    """Column name → cell: the leaderboard's numbers, with the search tools in `split` apart after Search Calls."""
    cells = {}
    for key, name in BROWSECOMP_PLUS_NAMES.items():
        value = getattr(scores, key)
        cells[name] = _cell(value, 2)
        if key == "search_calls":
            cells |= {f"{tool} calls": _cell(scores.calls_per_query.get(tool, 0.0)) for tool in split}
    return cells


def headline(scores: BrowseCompPlusScores) -> str:
    """E.g. "BrowseComp-Plus · 3 queries, 2 answered, 2 judged by browsecomp_plus (Qwen/Qwen3-32B)"."""
    judge = "" if scores.judge_preset is None else f", {scores.judged} judged by {scores.judge_preset} " \
                                                   f"({scores.judge_model})"
    return f"BrowseComp-Plus · {scores.queries} queries, {scores.answered} answered{judge}"


def notes(scores: BrowseCompPlusScores, run_dir: Path | str = "RUN") -> list[str]:
    """What a missing number needs, one line each with the command that gives it."""
    lines = []
    if scores.judge_preset != JUDGE_PRESET:
        judge = "no judge" if scores.judge_preset is None else f"the {scores.judge_preset} judge"
        lines.append(f"Accuracy and Calibration Error need verdicts of the {JUDGE_PRESET} judge (this run has "
                     f"{judge}): rollout report judge {run_dir} --preset {JUDGE_PRESET} --model NAME --base-url URL")
    elif scores.calibration_error is None and scores.judged:
        lines.append(f"Calibration Error needs at least 100 judged answers, as BrowseComp-Plus' evaluator does "
                     f"({scores.judged} here)")
    return lines


def print_block(console: Console, scores: BrowseCompPlusScores, run_dir: Path | str) -> None:
    """The block of the run's printed summary: a headline, one row of numbers, and what a missing one needs."""
    cells = leaderboard_cells(scores, search_columns(scores))
    table = Table(title=headline(scores), title_justify="left")
    for name in cells:
        table.add_column(name, justify="right")
    table.add_row(*cells.values())
    console.print(table)
    for line in notes(scores, run_dir):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
