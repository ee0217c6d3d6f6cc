"""Recall within a budget: chunk passages, re-rank the chunks against a query, keep the best that fit.

Used by the gateway's `recall_documents` and `chunk_documents` tools. Passages longer than `chunk_tokens`
whitespace tokens are split into consecutive windows (the corpus chunker's, without overlap); the chunks
are scored with Okapi BM25 whose document frequencies are taken over those chunks alone, and returned best
first up to `max_tokens` tokens of the given tokenizer (`rollout.llm.token_count`), the chunk that
crosses the budget cut where a token ends. Without a query the chunks keep the order given.

The IDF here is Lucene's, ln(1 + (N - df + 0.5) / (df + 0.5)), whatever the index's (`retriever.sparse.method`): over a
handful of chunks a term in most of them would get a zero or negative weight, and re-ranking a few
chunks needs every shared word to count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rollout.data.chunking import iter_chunks
from rollout.llm.token_count import TokenCounter
from rollout.records import Passage
from rollout.retrieval.tokenizer import tokenize_batch

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


@dataclass(frozen=True, slots=True)
class RecalledChunk:
    """One chunk kept by `recall`, best first."""

    passage: Passage
    """The corpus passage the chunk comes from."""
    chunk: int
    """0-based chunk of the passage (0 when the passage was not split)."""
    text: str
    """The chunk's text, cut to the budget when `truncated`."""
    score: float
    """BM25 score against the query, over the recalled chunks only (0 without a query)."""
    tokens: int
    """Tokens of `text`, by the budget's tokenizer."""
    truncated: bool
    """True when the text was cut to fit the budget."""


def bm25_scores(
    query: str, texts: Sequence[str], *, k1: float = DEFAULT_K1, b: float = DEFAULT_B, stopwords: bool = True,
    stemming: bool = False,
) -> list[float]:
    """Okapi BM25 of `query` against each text, with document frequencies taken over `texts` only."""
    if not texts:
        return []
    query_terms, *docs = tokenize_batch([query, *texts], stopwords=stopwords, stemming=stemming)
    counts = [Counter(d) for d in docs]
    df = Counter(term for c in counts for term in c)
    n = len(docs)
    avg_len = sum(len(d) for d in docs) / n or 1.0
    terms = list(dict.fromkeys(query_terms))
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    scores = []
    for doc, c in zip(docs, counts, strict=True):
        norm = k1 * (1.0 - b + b * len(doc) / avg_len)
        scores.append(sum(idf[t] * c[t] * (k1 + 1.0) / (c[t] + norm) for t in terms if c[t]))
    return scores


def recall(
    query: str | None, passages: Sequence[Passage], *, max_tokens: int, chunk_tokens: int, counter: TokenCounter,
    k1: float = DEFAULT_K1, b: float = DEFAULT_B, stopwords: bool = True, stemming: bool = False,
) -> list[RecalledChunk]:
    """The chunks of `passages` most relevant to `query` (in the given order without one), best first (ties
    keep corpus order), within `max_tokens` tokens counted by `counter`."""
    chunks = [
        (p, number, chunk)
        for p in passages
        for number, chunk in enumerate(iter_chunks(p, max_tokens=chunk_tokens, overlap=0))
    ]
    if query is None:
        scores = [0.0] * len(chunks)
    else:
        scores = bm25_scores(query, [c.contents for _, _, c in chunks], k1=k1, b=b, stopwords=stopwords,
                             stemming=stemming)
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))
    sizes = counter.count_batch([chunks[i][2].text for i in order])
    kept: list[RecalledChunk] = []
    used = 0
    for i, size in zip(order, sizes, strict=True):
        if used >= max_tokens:
            break
        passage, number, chunk = chunks[i]
        truncated = used + size > max_tokens
        text = counter.truncate(chunk.text, max_tokens - used) if truncated else chunk.text
        tokens = counter.count(text) if truncated else size
        if not text:
            break
        used += tokens
        kept.append(RecalledChunk(passage, number, text, scores[i], tokens, truncated))
    return kept
