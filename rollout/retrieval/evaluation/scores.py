"""Retrieval scored against the questions' gold passages or answers: recall@k, hit@k and MRR of each retriever.

Against the questions' gold passages (`metadata.gold_doc_ids`, matched on passage or source document id) where they
carry them; otherwise a hit is a top-k passage containing a gold answer (normalised), and recall is not defined.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollout.data import CorpusStore
from rollout.records import Passage, Question
from rollout.report.metrics import normalize_answer
from rollout.retrieval import Hits, Retriever


@dataclass(frozen=True, slots=True)
class RetrieverScores:
    """One retriever's row of the comparison table."""

    retriever: str
    n: int
    gold: str
    """What a hit is measured against: `passages` or `documents` (the gold ids name passages, or the source
    documents passages were chunked from: a document counts as found when any of its passages is),
    `passages and documents` (both kinds), or `answers` (answer containment, without gold ids)."""
    recall: dict[int, float | None]
    hit: dict[int, float]
    mrr: float
    queries_per_s: float


def _first_relevant_rank(relevant: Sequence[bool]) -> int | None:
    return next((i + 1 for i, r in enumerate(relevant) if r), None)


def _gold_kind(questions: Sequence[Question], passages: Sequence[Passage]) -> str:
    """Whether the questions' gold ids name passages, source documents (chunked corpora, folders of files), or both."""
    gold = sorted({g for q in questions for g in q.gold_doc_ids})
    if isinstance(passages, CorpusStore):  # looked up by id: a corpus of millions is not read through
        names_passage = bool((passages.rows_of(gold) >= 0).any())
        names_document = any(passages[row].doc_id is not None for g in gold for row in passages.doc_rows_of(g))
    else:
        names_passage = bool(set(gold) & {p.id for p in passages})
        names_document = bool(set(gold) & {p.doc_id for p in passages if p.doc_id is not None})
    if names_document and not names_passage:
        return "documents"
    return "passages and documents" if names_document else "passages"


def score_hits(hits: Hits, questions: Sequence[Question], passages: Sequence[Passage], ks: Sequence[int]) -> dict[str, Any]:
    """Per-k recall and hit rate and MRR over all questions (k at most `hits` width)."""
    recall = {k: [] for k in ks}
    hit = {k: [] for k in ks}
    rr = []
    with_gold = all(q.gold_doc_ids for q in questions)
    for q, rows in zip(questions, hits.indices, strict=True):
        ranked = [passages[r] for r in rows.tolist() if r >= 0]
        if with_gold:
            gold = set(q.gold_doc_ids)
            relevant = [p.id in gold or p.source_id in gold for p in ranked]
            found_ids = [{p.id, p.source_id} & gold for p in ranked]
            for k in ks:
                recall[k].append(len(set().union(*found_ids[:k])) / len(gold))
        else:
            answers = [f" {normalize_answer(a)} " for a in q.golden_answers if normalize_answer(a)]
            relevant = [any(a in f" {normalize_answer(p.contents)} " for a in answers) for p in ranked]
        for k in ks:
            hit[k].append(float(any(relevant[:k])))
        first = _first_relevant_rank(relevant)
        rr.append(0.0 if first is None else 1.0 / first)
    return {
        "gold": _gold_kind(questions, passages) if with_gold else "answers",
        "recall": {k: (float(np.mean(v)) if with_gold else None) for k, v in recall.items()},
        "hit": {k: float(np.mean(v)) for k, v in hit.items()},
        "mrr": float(np.mean(rr)),
    }


def evaluate(retrievers: dict[str, Retriever], questions: Sequence[Question], passages: Sequence[Passage],
             ks: Sequence[int]) -> list[RetrieverScores]:
    depth = min(max(ks), len(passages))
    rows = []
    for name, retriever in retrievers.items():
        started = time.perf_counter()
        hits = retriever.search([q.question for q in questions], depth)
        seconds = time.perf_counter() - started
        s = score_hits(hits, questions, passages, [k for k in ks if k <= depth])
        rows.append(RetrieverScores(name, len(questions), s["gold"], s["recall"], s["hit"], s["mrr"],
                                    len(questions) / seconds if seconds > 0 else float("inf")))
    return rows
