"""Documents ranked by their best passage, the search deepening until `depth` documents are found."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.base import Hits, top_k_hits
from rollout.retrieval.evaluation.document_run import document_run


class ScoredRetriever:
    """Fixed scores per query over the passages: an exact retriever that records the k it was asked for."""

    name = "fixed"

    def __init__(self, scores: dict[str, list[float]]) -> None:
        self.scores = scores
        self.asked: list[tuple[int, int]] = []

    def search(self, queries: Sequence[str], k: int) -> Hits:
        self.asked.append((len(queries), k))
        matrix = np.asarray([self.scores[q] for q in queries], dtype=np.float32)
        hits = top_k_hits(matrix, k)
        # Like BM25, a passage scoring 0 is no match: padding, which tells the caller there is nothing more.
        return Hits(np.where(hits.scores > 0, hits.indices, -1), np.where(hits.scores > 0, hits.scores, -np.inf))


def chunks(doc: str, n: int) -> list[Passage]:
    return [Passage(f"{doc}#{i}", doc, f"part {i}", doc_id=doc) for i in range(n)]


def test_documents_score_their_best_passage_and_the_search_deepens_to_find_enough():
    # Document a's four passages outscore everything: the top 2 passages name one document, so k doubles.
    passages = [*chunks("a", 4), *chunks("b", 2), Passage("c", "c", "whole")]
    retriever = ScoredRetriever({"q": [9, 8, 7, 6, 2, 5, 3]})
    run = document_run(retriever, ["1"], ["q"], passages, depth=2)
    assert run == {"1": {"a": 9.0, "b": 5.0}}
    assert [k for _, k in retriever.asked] == [2, 4, 7]  # 2 and 4 passages are all a's; 7 spans the corpus


def test_a_query_with_fewer_matches_than_depth_keeps_what_it_found():
    passages = [*chunks("a", 2), *chunks("b", 2)]
    retriever = ScoredRetriever({"q": [1, 0, 0, 0], "r": [1, 2, 3, 4]})
    run = document_run(retriever, ["1", "2"], ["q", "r"], passages, depth=3)
    assert run == {"1": {"a": 1.0}, "2": {"b": 4.0, "a": 2.0}}
    assert retriever.asked == [(2, 3), (1, 4)]  # the padded row stops; the other alone searches the corpus


def test_whole_documents_need_one_search_and_ties_rank_as_trec_eval():
    passages = [Passage(d, d, "text") for d in ("d1", "d2", "d3")]
    retriever = ScoredRetriever({"q": [1, 1, 1]})
    run = document_run(retriever, ["1"], ["q"], passages, depth=3)
    assert list(run["1"]) == ["d3", "d2", "d1"] and retriever.asked == [(1, 3)]
    # Which of the documents tied at the cut-off are kept is the retriever's choice (rollout's: the lower rows).
    assert list(document_run(retriever, ["1"], ["q"], passages, depth=2)["1"]) == ["d2", "d1"]


def test_every_question_gets_a_line_even_without_a_match():
    retriever = ScoredRetriever({"q": [0.0]})
    assert document_run(retriever, ["1"], ["q"], [Passage("d", "d", "x")], depth=5) == {"1": {}}


@pytest.mark.parametrize("depth", [0, -1, 2.5, True])
def test_depth_must_be_a_positive_integer(depth):
    with pytest.raises(RetrievalError, match="trec.depth"):
        document_run(ScoredRetriever({}), [], [], [], depth)
