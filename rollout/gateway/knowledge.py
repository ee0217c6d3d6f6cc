"""The knowledge base a gateway serves: passages plus the indexes its tools need."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rollout.data.records import Passage
from rollout.retrieval import Retriever


class PassageHit(BaseModel):
    """One ranked passage in a tool result."""

    id: str = Field(description="Passage id in the corpus")
    title: str = Field(description="Passage title")
    text: str = Field(description="Passage text")
    score: float = Field(description="Retriever score (higher is better; scales differ between retrievers)")
    rank: int = Field(description="1-based rank")


class SearchResult(BaseModel):
    """Structured content of a retrieval tool call."""

    query: str = Field(description="The query as searched")
    retriever: str = Field(description="Which index answered: dense or sparse")
    results: list[PassageHit] = Field(description="Passages, best first")


class CorpusInfo(BaseModel):
    """Structured content of the corpus-info tool."""

    num_passages: int = Field(description="Passages in the corpus")
    retrievers: list[str] = Field(description="Indexes loaded for this gateway")
    default_top_k: int = Field(description="Passages returned when top_k is not given")
    max_top_k: int = Field(description="Largest top_k accepted")


@dataclass(slots=True)
class KnowledgeBase:
    """Passages and loaded retrievers, shared by every tool call of a gateway."""

    passages: Sequence[Passage]
    retrievers: dict[str, Retriever] = field(default_factory=dict)
    default_top_k: int = 5
    max_top_k: int = 50
    max_query_chars: int = 2000

    def search(self, kind: str, query: str, top_k: int | None) -> SearchResult:
        """Rank passages for one query; argument problems raise ValueError for the agent to read."""
        query = query.strip()
        if not query:
            raise ValueError("query is empty: pass the words to search for")
        if len(query) > self.max_query_chars:
            raise ValueError(f"query is {len(query)} characters; the limit is {self.max_query_chars}")
        k = self.default_top_k if top_k is None else top_k
        if not 1 <= k <= self.max_top_k:
            raise ValueError(f"top_k must be between 1 and {self.max_top_k}, got {k}")
        retriever = self.retrievers.get(kind)
        if retriever is None:
            raise ValueError(f"the {kind} index is not loaded on this gateway")
        hits = retriever.search([query], k)
        results = []
        for row, score in zip(hits.indices[0].tolist(), hits.scores[0].tolist(), strict=True):
            if row < 0:
                break
            p = self.passages[row]
            results.append(PassageHit(id=p.id, title=p.title, text=p.text, score=score, rank=len(results) + 1))
        return SearchResult(query=query, retriever=kind, results=results)
