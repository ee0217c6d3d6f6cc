"""The one tokenizer BM25 indexing and BM25 queries share, whichever backend scores them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rollout.errors import RetrievalError

TOKENIZER_VERSION = "2"
"""Bumped whenever `tokenize` changes its output, so cached sparse indexes are rebuilt.

v2: optional Snowball stemming; without it the output is the same as v1's.
"""

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
"""Words dropped when `stopwords=True` (matched before stemming)."""


def tokenize(text: str, *, stopwords: bool = True, stemming: bool = False) -> list[str]:
    """Split text into lowercase word tokens for BM25.

    Tokens are maximal runs of letters and digits (any script); everything else, underscores
    included, separates them, so "VX-1234" gives ["vx", "1234"] and digits are kept. With
    `stopwords=True` the words in `ENGLISH_STOPWORDS` are dropped. With `stemming=True` the
    remaining tokens are reduced by the Snowball English stemmer ("borns" and "born" both give
    "born", "founded" gives "found"); that needs PyStemmer, imported on first use.
    """
    return tokenize_batch([text], stopwords=stopwords, stemming=stemming)[0]


def tokenize_batch(texts: Iterable[str], *, stopwords: bool = True, stemming: bool = False) -> list[list[str]]:
    """`tokenize` every text with the same options; one stemmer serves the whole batch."""
    stemmer = _english_stemmer() if stemming else None
    out: list[list[str]] = []
    for text in texts:
        tokens = _TOKEN.findall(text.lower())
        if stopwords:
            tokens = [t for t in tokens if t not in ENGLISH_STOPWORDS]
        if stemmer is not None and tokens:
            tokens = stemmer.stemWords(tokens)
        out.append(tokens)
    return out


def _english_stemmer() -> Any:
    """A fresh Snowball English stemmer (PyStemmer objects are not shared across threads)."""
    try:
        import Stemmer  # PyStemmer; only stemming needs it
    except ImportError as e:
        raise RetrievalError(
            "stemming=True needs the Snowball stemmer from PyStemmer; run `pip install PyStemmer` "
            "or set retriever.sparse.stemming=false"
        ) from e
    return Stemmer.Stemmer("english")
