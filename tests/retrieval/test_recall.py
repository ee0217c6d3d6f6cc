"""rollout.retrieval.recall: chunking, BM25 re-ranking over the chunks alone, and the token budget."""

import pytest

from rollout.llm.token_count import load_token_counter
from rollout.records import Passage
from rollout.retrieval.recall import bm25_scores, recall

COUNTER = load_token_counter(None)  # the bundled encoder's WordPiece: "stone" and "paris" are one token each


def test_a_word_every_text_shares_still_counts():
    # Robertson's IDF would be log(0.5 / 2.5) < 0 for a word in both texts; the recall IDF stays positive.
    scores = bm25_scores("paris", ["paris is big", "paris is old"])
    assert all(s > 0 for s in scores)
    assert bm25_scores("paris", []) == []


def test_long_passages_are_recalled_in_chunks_best_first_within_the_budget():
    long = Passage("p1", "Cities", " ".join(["stone"] * 10 + ["paris"] + ["stone"] * 9), doc_id="d1")
    short = Passage("p2", "Rivers", "the seine flows through paris and paris again")
    kept = recall("paris", [long, short], max_tokens=14, chunk_tokens=10, counter=COUNTER)
    assert [(c.passage.id, c.chunk) for c in kept] == [("p2", 0), ("p1", 1)]
    assert kept[0].tokens == 8 and not kept[0].truncated
    assert kept[1].tokens == 6 and kept[1].truncated and kept[1].text == "paris stone stone stone stone stone"
    assert sum(c.tokens for c in kept) == 14


def test_the_budget_counts_tokenizer_tokens_not_words():
    # "unbelievably" is five WordPiece tokens: a budget of 7 holds one such word and two more, not seven words.
    kept = recall(None, [Passage("p", "t", "unbelievably " * 5)], max_tokens=7, chunk_tokens=200, counter=COUNTER)
    [chunk] = kept
    assert chunk.truncated and chunk.tokens == COUNTER.count(chunk.text) <= 7
    assert chunk.text.startswith("unbelievably") and len(chunk.text.split()) == 2


def test_without_a_query_chunks_keep_the_order_given():
    passages = [Passage("p1", "t", "stone stone"), Passage("p2", "t", "paris paris")]
    kept = recall(None, passages, max_tokens=100, chunk_tokens=200, counter=COUNTER)
    assert [c.passage.id for c in kept] == ["p1", "p2"] and all(c.score == 0.0 for c in kept)


@pytest.mark.parametrize("budget", [1, 3])
def test_the_budget_is_never_exceeded(budget):
    kept = recall("a b", [Passage("p", "t", "a b c d e")], max_tokens=budget, chunk_tokens=200, counter=COUNTER)
    assert sum(c.tokens for c in kept) == budget and kept[0].truncated
