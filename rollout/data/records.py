"""Typed records for the corpus and the question set (FlashRAG conventions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable unit of the corpus."""

    id: str
    """Stable passage id, as in the corpus file."""
    title: str
    """First line of FlashRAG's `contents`."""
    text: str
    """The rest of `contents`."""
    doc_id: str | None = None
    """Source document of a chunk; None when the passage is the whole document."""

    @property
    def source_id(self) -> str:
        """The document this passage comes from: `doc_id` for a chunk, else the passage's own id."""
        return self.doc_id if self.doc_id is not None else self.id

    @property
    def contents(self) -> str:
        """FlashRAG's `contents` field: title, newline, text."""
        return f"{self.title}\n{self.text}"

    def to_json(self) -> dict[str, Any]:
        """A FlashRAG corpus line; `doc_id` only when set."""
        record: dict[str, Any] = {"id": self.id, "contents": self.contents}
        if self.doc_id is not None:
            record["doc_id"] = self.doc_id
        return record


@dataclass(frozen=True, slots=True)
class Question:
    """One task of the question set."""

    id: str
    """Task id, unique within the set."""
    question: str
    """What the agent is asked."""
    golden_answers: list[str]
    """Accepted answers; scoring never shows these to the agent."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form extras; `gold_doc_ids`, `hops` and `style` are read when present."""

    @property
    def gold_doc_ids(self) -> list[str]:
        return [str(d) for d in self.metadata.get("gold_doc_ids", [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": dict(self.metadata),
        }
