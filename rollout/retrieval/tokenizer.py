"""The one tokenizer BM25 indexing and BM25 queries share."""

from __future__ import annotations

import re

TOKENIZER_VERSION = "1"
"""Bumped whenever `tokenize` changes its output, so cached sparse indexes are rebuilt."""

_TOKEN = re.compile(r"[^\W_]+")

# A short list on purpose: only words that carry no topic. Longer lists (e.g. NLTK's) also
# drop words like "first" or "most" that keyword questions depend on.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """
    a an and are as at be been but by did do does for from had has have he her hers him his
    how i if in into is it its me my of on or our she so than that the their them then there
    these they this those to us was we were what when where which who whom whose why will
    with you your
    """.split()
)
"""Words dropped when `stopwords=True`."""


def tokenize(text: str, *, stopwords: bool = True) -> list[str]:
    """Split text into lowercase word tokens for BM25.

    Tokens are maximal runs of letters and digits (any script); everything else, underscores
    included, separates them, so "VX-1234" gives ["vx", "1234"] and digits are kept. With
    `stopwords=True` the words in `ENGLISH_STOPWORDS` are dropped.
    """
    tokens = _TOKEN.findall(text.lower())
    if stopwords:
        return [t for t in tokens if t not in ENGLISH_STOPWORDS]
    return tokens
