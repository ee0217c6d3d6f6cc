"""Split long documents into overlapping passages of whitespace tokens.

A document whose text has more than `max_tokens` whitespace-separated tokens becomes windows of
`max_tokens` tokens, each starting `max_tokens - overlap` tokens after the previous one; the last
window ends at the document's end. Chunk `i` of document `d` has id `d#i`, keeps the title, and
records `doc_id` = the document's source id, so retrieval can be scored per document. Each
chunk's text is the exact slice of the original text between its first and last token, so line
breaks inside a window survive. Shorter documents pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from rollout.data.specs import check_chunking
from rollout.records import Passage

_SPACE = re.compile(r"(\s+)")


def chunk_passages(docs: Sequence[Passage], *, max_tokens: int, overlap: int) -> list[Passage]:
    """Documents longer than `max_tokens` tokens split into overlapping windows; others unchanged."""
    check_chunking(max_tokens, overlap)
    return [chunk for doc in docs for chunk in iter_chunks(doc, max_tokens=max_tokens, overlap=overlap)]


def iter_chunks(doc: Passage, *, max_tokens: int, overlap: int) -> Iterator[Passage]:
    """The chunks of one document (the document itself when short). Arguments are not re-checked."""
    tokens = doc.text.split()
    n_tokens = len(tokens)
    if n_tokens <= max_tokens:
        yield doc
        return
    stripped = doc.text.strip()
    # Single spaces between tokens: joining tokens is exact and fast. Otherwise keep the original
    # whitespace: tokens at even indexes of `parts`, the whitespace between them at odd ones.
    parts = None if " ".join(tokens) == stripped else _SPACE.split(stripped)
    step = max_tokens - overlap
    source = doc.source_id
    for i, start in enumerate(range(0, n_tokens, step)):
        end = min(start + max_tokens, n_tokens)
        text = " ".join(tokens[start:end]) if parts is None else "".join(parts[2 * start : 2 * end - 1])
        yield Passage(f"{doc.id}#{i}", doc.title, text, doc_id=source)
        if end == n_tokens:
            return
