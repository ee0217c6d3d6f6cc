"""rollout.retrieval.recall: chunking, BM25 re-ranking over the chunks alone, and the token budget."""

import pytest

from rollout.records import Passage
from rollout.retrieval.recall import bm25_scores, recall


def test_a_word_every_text_shares_still_counts():
    # Robertson's IDF would be log(0.5 / 2.5) < 0 for a word in both texts; the recall IDF stays positive.
    scores = bm25_scores("paris", ["paris is big", "paris is old"])
    assert all(s > 0 for s in scores)
    assert bm25_scores("paris", []) == []


def test_long_passages_are_recalled_in_chunks_best_first_within_the_budget():
    long = Passage("p1", "Cities", " ".join(["filler"] * 10 + ["paris"] + ["filler"] * 9), doc_id="d1")
    short = Passage("p2", "Rivers", "the seine flows through paris and paris again")
    kept = recall("paris", [long, short], max_tokens=14, chunk_tokens=10)
    assert [(c.passage.id, c.chunk) for c in kept] == [("p2", 0), ("p1", 1)]
    assert kept[0].tokens == 8 and not kept[0].truncated
    assert kept[1].tokens == 6 and kept[1].truncated and kept[1].text == "paris filler filler filler filler filler"
    assert sum(c.tokens for c in kept) == 14


@pytest.mark.parametrize("budget", [1, 3])
def test_the_budget_is_never_exceeded(budget):
    kept = recall("a b", [Passage("p", "t", "a b c d e")], max_tokens=budget, chunk_tokens=200)
    assert sum(c.tokens for c in kept) == budget and kept[0].truncated
