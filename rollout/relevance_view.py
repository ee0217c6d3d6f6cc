"""A compact text view of documents and their relevance, for a model to read and for people to look at.

The gateway's step tools (`retrieve_documents`, `filter_documents`, `search_sources`,
`visualize_doc_relevance`) answer with this view as their text, so what the agent reads is short and
what `python -m rollout.view RUN --task ID` replays is the same view. One row per document:

    Relevance to "where was Arlen Voss born" (filter_documents, 0-10, relevant at 5 or more)
     1. [########..]  8 ✓ voss · Arlen Voss · 120 tokens

Scores on a 0-10 scale fill the bar by value; other scores (a retriever's) fill it relative to the best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HEADING = "Relevance to "
"""How every view starts; `is_relevance_view` looks for it."""
BAR_WIDTH = 10


@dataclass(frozen=True, slots=True)
class RelevanceRow:
    """One document in the view."""

    doc_id: str
    title: str
    score: float | None
    """The document's score (None: not scored)."""
    relevant: bool | None = None
    """Whether it passed the relevance threshold (None: no threshold applied)."""
    tokens: int | None = None
    """The document's size in tokens, when known."""


def render_relevance(query: str | None, rows: Sequence[RelevanceRow], *, source: str,
                     scale: float | None = None, threshold: float | None = None) -> str:
    """The view of `rows` (in the order given). `scale` is the top of a fixed score scale (10 for relevance
    scores); without one bars are relative to the best score. `source` names the tool the scores come from."""
    about = f'"{query}"' if query else "the query"
    note = [source]
    if scale is not None:
        note.append(f"0-{scale:g}")
    if threshold is not None:
        note.append(f"relevant at {threshold:g} or more")
    lines = [f"{HEADING}{about} ({', '.join(note)})"]
    if not rows:
        return lines[0] + "\nNo documents."
    top = scale if scale is not None else max((r.score for r in rows if r.score is not None), default=0.0)
    width = len(str(len(rows)))
    for i, row in enumerate(rows, start=1):
        mark = "" if row.relevant is None else (" ✓" if row.relevant else " ✗")
        size = "" if row.tokens is None else f" · {row.tokens} tokens"
        title = f" · {row.title}" if row.title and row.title != row.doc_id else ""
        lines.append(f"{i:>{width}}. {_bar(row.score, top)} {_score(row.score, scale)}{mark} {row.doc_id}{title}{size}")
    return "\n".join(lines)


def is_relevance_view(text: str) -> bool:
    """True for a text `render_relevance` made."""
    return text.startswith(HEADING)


def _bar(score: float | None, top: float) -> str:
    if score is None:
        return "[" + " " * BAR_WIDTH + "]"
    filled = round(BAR_WIDTH * max(0.0, min(1.0, score / top))) if top > 0 else 0
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _score(score: float | None, scale: float | None) -> str:
    if score is None:
        return " -"
    return f"{score:>2.0f}" if scale is not None else f"{score:.3f}"
