"""A retriever's ranking of documents: passages ranked up to their documents by their best passage's score.

Qrels judge documents (BrowseComp-Plus' docids), while an index may hold passages cut from them ("<docid>#<i>",
`Passage.doc_id` naming the document). A document scores what its best passage scores (MaxP), so the first
documents of the ranking are exact as long as the search went deep enough to find them all: a document none of whose
passages is among the top k scores below the k-th passage. The search deepens for the queries whose top k passages
name fewer than `depth` documents (k doubled, or raised further to where the documents they found per passage on
average would reach `depth`), until they do, the retriever has nothing more, or k spans the corpus.
Where passages are whole documents, one search at k = depth suffices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rollout.data.corpus_store import source_id_of
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import Retriever
from rollout.retrieval.evaluation.trec import Run, ranking

QUERY_BATCH = 256
"""Queries searched together: bounds the (queries x k) hit arrays when k grows to thousands of passages."""


class _SourceIds:
    """Each row's document id, each row read once (from a store's id columns, not its text)."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self._passages = passages
        self._known: dict[int, str] = {}

    def __call__(self, row: int) -> str:
        found = self._known.get(row)
        if found is None:
            found = self._known[row] = source_id_of(self._passages, row)
        return found


def _best_per_document(rows: np.ndarray, scores: np.ndarray, source: _SourceIds) -> dict[str, float]:
    """Document id -> its best passage's score, over one query's hits (best first; padding rows are negative)."""
    best: dict[str, float] = {}
    for row, score in zip(rows.tolist(), scores.tolist(), strict=True):
        if row < 0:
            break
        best.setdefault(source(row), float(score))  # hits come best first: the first passage seen is the best
    return best


def document_run(retriever: Retriever, query_ids: Sequence[str], queries: Sequence[str],
                 passages: Sequence[Passage], depth: int) -> Run:
    """The `depth` best documents of each query (query id -> docid -> score), ranked by their best passage."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise RetrievalError(f"trec.depth must be a positive integer, got {depth!r}; BrowseComp-Plus ranks 1000")
    if len(query_ids) != len(queries):
        raise RetrievalError(f"{len(query_ids)} query ids for {len(queries)} queries")
    n = len(passages)
    source = _SourceIds(passages)
    found: dict[int, dict[str, float]] = {}
    for start in range(0, len(queries), QUERY_BATCH):
        pending = list(range(start, min(start + QUERY_BATCH, len(queries))))
        k = min(depth, n)
        while pending and k > 0:
            hits = retriever.search([queries[i] for i in pending], k)
            deeper, named = [], 0
            for row, i in enumerate(pending):
                docs = _best_per_document(hits.indices[row], hits.scores[row], source)
                exhausted = k >= n or bool((hits.indices[row] < 0).any())  # padding: the retriever has no more
                if len(docs) >= depth or exhausted:
                    found[i] = docs
                else:
                    deeper.append(i)
                    named += len(docs)
            # Each search ranks the whole index again: rather than doubling round after round, go straight to the
            # k at which the documents these queries found per passage, on average, would reach `depth`.
            wanted = -(-k * depth * len(deeper) // max(named, 1))
            pending, k = deeper, min(max(2 * k, wanted), n)
    run: Run = {}
    for i, qid in enumerate(query_ids):
        docs = found.get(i, {})
        run[str(qid)] = {d: docs[d] for d in ranking(docs)[:depth]}
    return run
