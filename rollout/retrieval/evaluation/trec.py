"""TREC run and qrels files, and recall@k and nDCG@k computed as trec_eval computes them.

A run file has one line per retrieved document, `query_id Q0 docid rank score tag`; a qrels file one per judged
document, `query_id 0 docid relevance`. BrowseComp-Plus scores a retriever with
`trec_eval -c -m recall.5,100,1000 -m ndcg_cut.10 QRELS RUN`, and this module reproduces that arithmetic
(trec_eval 9, which pytrec_eval and Pyserini's `trec_eval` run), so its numbers equal theirs on the same files:

- A query's documents are ranked by score, highest first; documents tied in score by docid, *descending*
  (`strcmp` order, which is Python's `str` order for UTF-8). The rank column is not read. `write_run` writes
  documents in that order, so the ranks in a file are the ranks every evaluator computes from it.
- A document is relevant when its judgment is at least 1. Recall@k is the relevant documents in the top k over
  the query's relevant documents in the qrels (0 when it has none).
- nDCG@k gains each document its judgment (when above 0) discounted by log2(rank + 1), over the ideal: the qrels'
  positive judgments sorted high to low, discounted alike, cut at k (0 when the ideal is 0).
- Averages are over every query of the qrels (trec_eval's `-c`): a query the run misses counts 0, and a query
  the run holds but the qrels do not is ignored. A query the qrels hold with no relevant judgment counts 0, as in
  trec_eval 9 (older versions left it out); BrowseComp-Plus' qrels have none, and qrels made from the questions'
  metadata (`binary_qrels`) leave out a question that names no document, as trec_eval ignores an unjudged query.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import DataError

Run = dict[str, dict[str, float]]
"""query id -> docid -> score: what trec_eval reads from a run file (ranks are recomputed from scores)."""
Qrels = dict[str, dict[str, int]]
"""query id -> docid -> relevance judgment."""

RELEVANT = 1
"""The lowest judgment that counts as relevant (trec_eval's default `-l 1`)."""
BROWSECOMP_PLUS_MEASURES = ("Recall@5", "Recall@100", "Recall@1000", "nDCG@10")
"""What BrowseComp-Plus' retrieval leaderboard reports against each of its qrels."""
_MEASURE = re.compile(r"^(Recall|nDCG)@([1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class Measure:
    """One measure at a cutoff, named as BrowseComp-Plus' leaderboard names it (`Recall@100`, `nDCG@10`)."""

    kind: str
    """`Recall` or `nDCG`."""
    k: int
    """The cutoff: documents ranked below it do not count."""

    @property
    def name(self) -> str:
        return f"{self.kind}@{self.k}"

    @property
    def trec_eval_name(self) -> str:
        """trec_eval's name of the same number (`recall_100`, `ndcg_cut_10`)."""
        return f"recall_{self.k}" if self.kind == "Recall" else f"ndcg_cut_{self.k}"

    @classmethod
    def parse(cls, name: str) -> Measure:
        found = _MEASURE.match(str(name).strip())
        if not found:
            raise DataError(f"unknown measure {name!r}: name Recall@K or nDCG@K with a positive K, e.g. "
                            f"{', '.join(BROWSECOMP_PLUS_MEASURES)}")
        return cls(found.group(1), int(found.group(2)))

    def of(self, ranked: Sequence[str], judgments: Mapping[str, int]) -> float:
        """This measure of one query's ranked docids against its judgments."""
        return recall_at(ranked, judgments, self.k) if self.kind == "Recall" else ndcg_at(ranked, judgments, self.k)


@dataclass(frozen=True, slots=True)
class TrecScores:
    """A run's measures against one qrels, averaged as `trec_eval -c` averages them."""

    queries: int
    """Queries averaged over: every query of the qrels."""
    missing: int
    """Of those, queries the run holds no document for (each counts 0)."""
    mean: dict[str, float]
    """Measure name -> mean over the queries."""
    per_query: dict[str, dict[str, float]]
    """Query id -> measure name -> value."""


def ranking(scores: Mapping[str, float]) -> list[str]:
    """One query's docids in trec_eval's order: score descending, ties by docid descending."""
    by_docid = sorted(scores, reverse=True)
    return sorted(by_docid, key=lambda d: -scores[d])  # stable: equal scores keep the descending docids


def recall_at(ranked: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """Relevant documents among the first k over the relevant documents judged (0 when none is)."""
    relevant = sum(1 for rel in judgments.values() if rel >= RELEVANT)
    if not relevant:
        return 0.0
    return sum(1 for d in ranked[:k] if judgments.get(d, 0) >= RELEVANT) / relevant


def ndcg_at(ranked: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """nDCG over the first k: each judgment above 0 as the gain, discounted by log2(rank + 1), over the ideal's."""
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(judgments.get(d, 0) for d in ranked[:k]) if g > 0)
    ideal_gains = sorted((g for g in judgments.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    return dcg / ideal if ideal > 0 else 0.0


def evaluate(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
             measures: Iterable[Measure | str]) -> TrecScores:
    """`measures` of `run` against `qrels`, per query and averaged over every query of the qrels (`trec_eval -c`)."""
    chosen = [m if isinstance(m, Measure) else Measure.parse(m) for m in measures]
    per_query: dict[str, dict[str, float]] = {}
    for qid, judgments in qrels.items():
        ranked = ranking(run.get(qid, {}))
        per_query[qid] = {m.name: m.of(ranked, judgments) for m in chosen}
    n = len(per_query)
    # Summed in the qrels' order, as trec_eval accumulates; a mean of no queries is 0, not an error.
    mean = {m.name: (math.fsum(v[m.name] for v in per_query.values()) / n if n else 0.0) for m in chosen}
    missing = sum(1 for qid in qrels if not run.get(qid))
    return TrecScores(n, missing, mean, per_query)


def binary_qrels(relevant: Mapping[str, Iterable[str]]) -> Qrels:
    """Qrels judging each listed docid relevant (1); a query with no docid is left out, as if unjudged."""
    out: Qrels = {}
    for qid, docids in relevant.items():
        judged = {str(d): 1 for d in docids}
        if judged:
            out[str(qid)] = judged
    return out


def _check_field(value: str, what: str, where: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise DataError(f"{where}: {what} {value!r} cannot be written in a TREC file, whose fields are separated by "
                        f"whitespace; give ids without spaces")


@dataclass(frozen=True, slots=True)
class RunDepth:
    """How many documents a run holds per query, against the depth asked. A TREC run file has no header to say it
    (trec_eval reads every line as a document), so the tables and JSON that name a run file say it instead."""

    asked: int
    """Documents per query asked for (`trec.depth`)."""
    queries: int
    """Queries in the run, those holding no document included."""
    mean: float
    """Documents held per query, on average over `queries`."""
    least: int
    """The fewest documents any query holds."""
    most: int
    """The most documents any query holds."""
    short_queries: int
    """Queries holding fewer than `asked`: the retriever matched fewer documents, or the corpus holds fewer."""

    @classmethod
    def of(cls, run: Mapping[str, Mapping[str, float]], asked: int) -> RunDepth:
        held = [len(docs) for docs in run.values()]
        return cls(asked, len(held), math.fsum(held) / len(held) if held else 0.0, min(held, default=0),
                   max(held, default=0), sum(1 for n in held if n < asked))

    def describe(self) -> str:
        """`asked 1000 documents per query, held 1000`, or where some queries hold fewer
        `asked 1000 documents per query, held 10.5 on average, at least 3`."""
        asked = f"asked {self.asked} documents per query"
        if not self.short_queries:
            return f"{asked}, held {self.least}"
        return f"{asked}, held {self.mean:.1f} on average, at least {self.least}"

    def brief(self) -> str:
        """The held depth for a table cell: `1000`, or `10.5 avg, min 3`."""
        return str(self.least) if not self.short_queries else f"{self.mean:.1f} avg, min {self.least}"

    def to_json(self) -> dict[str, Any]:
        """The `held` object beside a run file's `depth` (the depth asked) in retrieval_eval.json."""
        return {"mean": self.mean, "least": self.least, "most": self.most, "short_queries": self.short_queries}


def write_run(path: Path | str, run: Mapping[str, Mapping[str, float]], tag: str) -> Path:
    """The run as a TREC run file, each query's documents in trec_eval's order with ranks from 1.

    Scores are written exactly (`repr` of the float), so no two scores become a tie that the file's reader would
    order differently from the ranks written."""
    path = Path(path)
    _check_field(tag, "run tag", str(path))
    lines = []
    for qid, scores in run.items():
        _check_field(str(qid), "query id", str(path))
        for rank, docid in enumerate(ranking(scores), 1):
            _check_field(docid, "docid", str(path))
            score = float(scores[docid])
            if math.isnan(score):
                raise DataError(f"{path}: query {qid}, document {docid} scores NaN, which no evaluator can rank")
            lines.append(f"{qid} Q0 {docid} {rank} {score!r} {tag}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return path


def write_qrels(path: Path | str, qrels: Mapping[str, Mapping[str, int]]) -> Path:
    """The qrels as a TREC qrels file (`query_id 0 docid relevance`)."""
    path = Path(path)
    lines = []
    for qid, judgments in qrels.items():
        _check_field(str(qid), "query id", str(path))
        for docid, rel in judgments.items():
            _check_field(str(docid), "docid", str(path))
            lines.append(f"{qid} 0 {docid} {int(rel)}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _read_table(path: Path | str, shape: str, value: str, convert: Callable[[str], float], kind: str,
                verb: str) -> dict[str, dict[str, Any]]:
    """A TREC file of `shape`'s fields (query id first, docid third) as query id -> docid -> `convert` of the
    `value` field; a docid twice for one query is refused, as trec_eval refuses it."""
    names = shape.split()
    column = names.index(value)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e}); give the path of a TREC {shape} file") from e
    table: dict[str, dict[str, Any]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != len(names):
            raise DataError(f"{path}:{lineno}: expected {len(names)} fields ({shape}), found {len(parts)}: "
                            f"{line.strip()!r}")
        qid, docid, raw = parts[0], parts[2], parts[column]
        try:
            converted = convert(raw)
        except ValueError:
            raise DataError(f"{path}:{lineno}: {value} {raw!r} is not {kind}") from None
        row = table.setdefault(qid, {})
        if docid in row:
            raise DataError(f"{path}:{lineno}: document {docid} is {verb} twice for query {qid}")
        row[docid] = converted
    return table


def read_run(path: Path | str) -> Run:
    """A TREC run file: `query_id Q0 docid rank score tag` per line (the rank is not read; scores order a query's
    documents). A docid twice for one query is refused, as trec_eval refuses it."""
    return _read_table(path, "query_id Q0 docid rank score tag", "score", float, "a number", "listed")


def read_qrels(path: Path | str) -> Qrels:
    """A TREC qrels file: `query_id iteration docid relevance` per line (the iteration is not read). A docid judged
    twice for one query is refused, as trec_eval refuses it."""
    return _read_table(path, "query_id 0 docid relevance", "relevance", int, "an integer", "judged")
