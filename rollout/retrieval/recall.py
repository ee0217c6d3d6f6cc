"""Recall within a budget: chunk passages, re-rank the chunks against a query, keep the best that fit.

Used by the gateway's `recall_documents` tool. Passages longer than `chunk_tokens` whitespace tokens
are split into consecutive windows (the corpus chunker's, without overlap); the chunks are scored with
Okapi BM25 whose document frequencies are taken over those chunks alone, and returned best first up to
`max_tokens` whitespace tokens, the chunk that crosses the budget cut to fit.

The IDF here is Lucene's, ln(1 + (N - df + 0.5) / (df + 0.5)), not the index's Robertson IDF: over a
handful of chunks a term in most of them would get a zero or negative weight, and re-ranking a few
chunks needs every shared word to count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rollout.data.chunking import iter_chunks
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
    """BM25 score against the query, over the recalled chunks only."""
    tokens: int
    """Whitespace tokens of `text`."""
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
    query: str, passages: Sequence[Passage], *, max_tokens: int, chunk_tokens: int, k1: float = DEFAULT_K1,
    b: float = DEFAULT_B, stopwords: bool = True, stemming: bool = False,
) -> list[RecalledChunk]:
    """The chunks of `passages` most relevant to `query`, best first (ties keep corpus order), within
    `max_tokens` whitespace tokens."""
    chunks = [
        (p, number, chunk)
        for p in passages
        for number, chunk in enumerate(iter_chunks(p, max_tokens=chunk_tokens, overlap=0))
    ]
    scores = bm25_scores(query, [c.contents for _, _, c in chunks], k1=k1, b=b, stopwords=stopwords,
                         stemming=stemming)
    kept: list[RecalledChunk] = []
    used = 0
    for i in sorted(range(len(chunks)), key=lambda i: (-scores[i], i)):
        if used >= max_tokens:
            break
        passage, number, chunk = chunks[i]
        words = chunk.text.split()
        truncated = used + len(words) > max_tokens
        text = " ".join(words[: max_tokens - used]) if truncated else chunk.text
        tokens = min(len(words), max_tokens - used)
        used += tokens
        kept.append(RecalledChunk(passage, number, text, scores[i], tokens, truncated))
    return kept
