"""The knowledge base a gateway serves: passages plus the indexes its tools need.

Passage search ranks passages with one index. Document search and recall work on source
documents (`Passage.source_id`): `search_documents` ranks passages with one index (sparse, dense
or hybrid) and keeps each document's best passage score; `recall_documents` checks its arguments
and hands the passages of the chosen documents to `rollout.retrieval.recall` (chunk, re-rank, cut
to a budget of the gateway's tokenizer's tokens).
This module holds the tools' result models and argument limits; the retrieval itself is in
`rollout.retrieval`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, Field

from rollout.data.corpus_store import CorpusStore, source_id_of
from rollout.gateway.steps import RecentResults, StepSettings
from rollout.llm.token_count import TokenCounter, load_token_counter
from rollout.records import Passage
from rollout.retrieval import Retriever
from rollout.retrieval.base import PAD_INDEX
from rollout.retrieval.recall import recall
from rollout.wire import MAX_DOCS_PER_CALL

# The fields several tools' results share, each described once: the descriptions are part of the output schemas
# a model is shown.
Rank = Annotated[int, Field(description="1-based rank")]
SearchedQuery = Annotated[str, Field(description="The query as searched")]
SourceDocId = Annotated[str, Field(description="Source document id")]
PassageId = Annotated[str, Field(description="Passage id in the corpus")]
PassageTitle = Annotated[str, Field(description="Passage title")]
RetrieverScore = Annotated[float, Field(description="Retriever score (higher is better; scales differ between "
                                                    "retrievers)")]


class PassageHit(BaseModel):
    """One ranked passage in a tool result."""

    id: PassageId
    doc_id: str = Field(description="Source document id (the passage id unless documents were chunked)")
    title: PassageTitle
    text: str = Field(description="Passage text")
    score: RetrieverScore
    rank: Rank


class SearchResult(BaseModel):
    """Structured content of a retrieval tool call."""

    query: SearchedQuery
    retriever: str = Field(description="Which index answered: dense, sparse or hybrid")
    results: list[PassageHit] = Field(description="Passages, best first")


class DocumentHit(BaseModel):
    """One ranked source document in a document search; no content."""

    id: str = Field(description="Document id (the same as doc_id; pass it to recall_documents)")
    doc_id: SourceDocId
    title: str = Field(description="Title of the document's best-matching passage")
    score: float = Field(description="Score of the document's best-matching passage (higher is better; scales "
                                     "differ between retrievers)")
    rank: Rank
    num_passages: int = Field(description="Passages the document has in the corpus")


class DocumentSearchResult(BaseModel):
    """Structured content of a document search."""

    query: SearchedQuery
    retriever: str = Field(description="Which index ranked them: sparse, dense or hybrid")
    results: list[DocumentHit] = Field(description="Documents, best first (by keyword search: only those sharing a "
                                                   "word with the query)")


class RecalledPassage(BaseModel):
    """One passage (or chunk of a long passage) recalled for a query."""

    id: PassageId
    doc_id: SourceDocId
    chunk: int = Field(description="0-based chunk of the passage (passages longer than the chunk size are split)")
    title: PassageTitle
    text: str = Field(description="The chunk's text")
    score: float = Field(description="BM25 score against the query, over the recalled chunks only (0 without one)")
    rank: Rank
    tokens: int = Field(description="Tokens of text, by the gateway's tokenizer")
    truncated: bool = Field(description="True when the text was cut to fit the token budget")


class RecallResult(BaseModel):
    """Structured content of a recall."""

    query: str | None = Field(description="The query the chunks were ranked against (None: kept in document order)")
    doc_ids: list[str] = Field(description="Documents recalled from, as given or as found by search_documents")
    max_tokens: int = Field(description="Token budget, in tokens of the gateway's tokenizer")
    total_tokens: int = Field(description="Tokens returned, at most max_tokens")
    results: list[RecalledPassage] = Field(description="Chunks, best first")

    def render(self) -> str:
        """The chunks as text for a model: a header per chunk, then its text."""
        if not self.results:
            return f"No passages recalled for {self.query!r}." if self.query else "No passages recalled."
        blocks = [
            f"[{r.rank}] {r.title} (doc {r.doc_id}, passage {r.id}, chunk {r.chunk}, score {r.score:.3f})\n{r.text}"
            for r in self.results
        ]
        return "\n\n".join(blocks)


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
    default_max_docs: int = 10
    """Documents search_documents (max_files), retrieve_documents and search_sources (max_docs) return when a call
    leaves the count out; their input schemas state it (`--default-max-docs`)."""
    max_files: int = MAX_DOCS_PER_CALL
    max_recall_tokens: int = 32000
    chunk_tokens: int = 200
    """Passages longer than this many whitespace tokens are recalled in chunks."""
    tokenizer: TokenCounter | None = None
    """Counts context tokens and cuts budgets (`tokenizer=`); None loads the bundled encoder's on first use."""
    snippet_tokens: int = 512
    """Tokens of a document's beginning BrowseComp-Plus' search tool returns as its snippet (`retriever.snippet`)."""
    snippet_tokenizer: TokenCounter | None = None
    """The tokenizer those tokens are counted in (`retriever.snippet.tokenizer`); None: `token_counter()`'s."""
    steps: StepSettings = field(default_factory=StepSettings)
    """How the step tools score and answer (LLM endpoint or offline), and the root of a folder corpus."""
    recent: RecentResults = field(default_factory=RecentResults, repr=False, compare=False)
    """Each task's last scored document list, for `visualize_doc_relevance`."""
    _doc_rows: dict[str, tuple[int, ...]] | None = field(default=None, init=False, repr=False, compare=False)
    _doc_tokens: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def token_counter(self) -> TokenCounter:
        """The tokenizer budgets and context counts use (the bundled encoder's unless one was given)."""
        if self.tokenizer is None:
            self.tokenizer = load_token_counter(None)
        return self.tokenizer

    def snippet_counter(self) -> TokenCounter:
        """The tokenizer snippets are cut with: `retriever.snippet.tokenizer`'s, else the gateway's."""
        return self.snippet_tokenizer if self.snippet_tokenizer is not None else self.token_counter()

    def doc_rows(self) -> Mapping[str, tuple[int, ...]]:
        """Passage rows of each source document, in corpus order: looked up on a corpus store, else built on first
        use."""
        if isinstance(self.passages, CorpusStore):
            return self.passages.doc_rows()
        if self._doc_rows is None:
            rows: dict[str, list[int]] = {}
            for row, p in enumerate(self.passages):
                rows.setdefault(p.source_id, []).append(row)
            self._doc_rows = {doc: tuple(r) for doc, r in rows.items()}
        return self._doc_rows

    def check_query(self, query: str) -> str:
        query = query.strip()
        if not query:
            raise ValueError("query is empty: pass the words to search for")
        if len(query) > self.max_query_chars:
            raise ValueError(f"query is {len(query)} characters; the limit is {self.max_query_chars}")
        return query

    def search(self, kind: str, query: str, top_k: int | None) -> SearchResult:
        """Rank passages for one query; argument problems raise ValueError for the agent to read."""
        return self.search_many(kind, [query], top_k)[0]

    def search_many(self, kind: str, queries: Sequence[str], top_k: int | None) -> list[SearchResult]:
        """Rank passages for each query with one call to the index (for a dense one: one encode, one search), each
        result as `search` gives it for that query alone; argument problems raise ValueError."""
        checked, ranked = self.search_rows(kind, queries, top_k)
        answers = []
        for query, rows in zip(checked, ranked, strict=True):
            results = []
            for rank, (row, score) in enumerate(rows, start=1):
                p = self.passages[row]
                results.append(PassageHit(id=p.id, doc_id=p.source_id, title=p.title, text=p.text, score=score,
                                          rank=rank))
            answers.append(SearchResult(query=query, retriever=kind, results=results))
        return answers

    def search_rows(self, kind: str, queries: Sequence[str], top_k: int | None
                    ) -> tuple[list[str], list[list[tuple[int, float]]]]:
        """The queries as searched and, for each, its (passage row, score) pairs best first, from one call to the
        index: `search_many` without building result models (`POST /retrieve` writes its answer from the rows)."""
        checked = [self.check_query(query) for query in queries]
        k = self.default_top_k if top_k is None else top_k
        if not 1 <= k <= self.max_top_k:
            raise ValueError(f"top_k must be between 1 and {self.max_top_k}, got {k}")
        hits = self.retriever(kind).search(checked, k)
        ranked = []
        for rows, scores in zip(hits.indices.tolist(), hits.scores.tolist(), strict=True):
            found = rows.index(PAD_INDEX) if PAD_INDEX in rows else len(rows)  # padding only follows the hits
            ranked.append(list(zip(rows[:found], scores[:found], strict=True)))
        return checked, ranked

    def retriever(self, kind: str) -> Retriever:
        """The loaded index `kind` names; a ValueError (for the agent) when this gateway has not loaded it."""
        retriever = self.retrievers.get(kind)
        if retriever is None:
            raise ValueError(f"the {kind} index is not loaded on this gateway")
        return retriever

    def check_doc_ids(self, doc_ids: Sequence[str] | None, tool: str = "search_documents") -> list[str]:
        """`doc_ids` without repeats, each a known document; a ValueError (for the agent) says which are not."""
        docs = list(dict.fromkeys(str(d) for d in doc_ids or ()))
        # Bounded as a query is: the errors below echo the ids to the model.
        if (long := next((d for d in docs if len(d) > self.max_query_chars), None)) is not None:
            raise ValueError(f"a doc_id is {len(long)} characters; the limit is {self.max_query_chars}: pass the "
                             f"doc_id values {tool} returned")
        if not docs:
            raise ValueError(f"doc_ids is empty: pass the doc_id values {tool} returned")
        if len(docs) > self.max_files:
            raise ValueError(f"at most {self.max_files} doc_ids per call, got {len(docs)}")
        doc_rows = self.doc_rows()
        unknown = [d for d in docs if d not in doc_rows]
        if unknown:
            raise ValueError(
                f"unknown document ids: {', '.join(unknown)}. Pass ids that {tool} returned (results[].doc_id)"
            )
        return docs

    def doc_passages(self, doc: str) -> list[Passage]:
        """The passages of a known document, in corpus order."""
        return [self.passages[row] for row in self.doc_rows()[doc]]

    def doc_tokens(self, doc: str) -> int:
        """A known document's size: the tokens of its passages' text; counted once per document."""
        size = self._doc_tokens.get(doc)
        if size is None:
            size = self._doc_tokens[doc] = sum(self.token_counter().count_batch([p.text for p in self.doc_passages(doc)]))
        return size

    def rank_documents(self, kind: str, query: str, n: int) -> list[tuple[str, float, int]]:
        """(document, best passage score, that passage's row) of the `n` best documents by index `kind`."""
        retriever = self.retriever(kind)
        # Deep enough that documents split into many passages still yield n distinct documents.
        depth = min(len(self.passages), max(100, 10 * n))
        if depth == 0:
            return []
        hits = retriever.search([query], depth)  # BM25 returns only passages that match (score above 0)
        scored = zip(hits.indices[0].tolist(), hits.scores[0].tolist(), strict=True)
        return self.best_per_document((row, score) for row, score in scored if row >= 0)[:n]

    def best_per_document(self, scored: Iterable[tuple[int, float]]) -> list[tuple[str, float, int]]:
        """(document, best passage score, that passage's row) from scored passage rows, best first (ties by row);
        of a document's passages with the same best score, the first given counts."""
        best: dict[str, tuple[float, int]] = {}
        for row, score in scored:
            doc = source_id_of(self.passages, row)  # a store reads the ids, not the passage's text
            if doc not in best or score > best[doc][0]:
                best[doc] = (score, row)
        ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1]))
        return [(doc, score, row) for doc, (score, row) in ranked]

    def check_count(self, name: str, value: int | None, default: int) -> int:
        n = default if value is None else value
        if not 1 <= n <= self.max_files:
            raise ValueError(f"{name} must be between 1 and {self.max_files}, got {n}")
        return n

    def search_documents(self, query: str, max_files: int | None = None, kind: str = "sparse") -> DocumentSearchResult:
        """Rank source documents by their best passage's score on index `kind`; by BM25, documents sharing no
        word with the query are left out."""
        query = self.check_query(query)
        n = self.check_count("max_files", max_files, self.default_max_docs)
        doc_rows = self.doc_rows()
        results = [
            DocumentHit(id=doc, doc_id=doc, title=self.passages[row].title, score=score, rank=i,
                        num_passages=len(doc_rows[doc]))
            for i, (doc, score, row) in enumerate(self.rank_documents(kind, query, n), start=1)
        ]
        return DocumentSearchResult(query=query, retriever=kind, results=results)

    def recall_documents(
        self, query: str, max_tokens: int, doc_ids: Sequence[str] | None = None, kind: str = "sparse"
    ) -> RecallResult:
        """The passages of `doc_ids` (or of a document search for `query` on index `kind`), chunked, re-ranked
        against the query and cut to `max_tokens` tokens of the gateway's tokenizer, best first."""
        query = self.check_query(query)
        docs = (self.check_doc_ids(doc_ids) if doc_ids
                else [hit.doc_id for hit in self.search_documents(query, kind=kind).results])
        return self.read_documents(query, docs, max_tokens, "max_tokens")

    def read_documents(self, query: str | None, docs: Sequence[str], max_tokens: int, budget_name: str) -> RecallResult:
        """The chunks of known documents `docs`, re-ranked against `query` when given, within `max_tokens`."""
        if not 1 <= max_tokens <= self.max_recall_tokens:
            raise ValueError(f"{budget_name} must be between 1 and {self.max_recall_tokens}, got {max_tokens}")
        passages = [p for doc in docs for p in self.doc_passages(doc)]
        kept = recall(query, passages, max_tokens=max_tokens, chunk_tokens=self.chunk_tokens,
                      counter=self.token_counter(), **self.bm25_options())
        results = [
            RecalledPassage(id=c.passage.id, doc_id=c.passage.source_id, chunk=c.chunk, title=c.passage.title,
                            text=c.text, score=c.score, rank=rank, tokens=c.tokens, truncated=c.truncated)
            for rank, c in enumerate(kept, start=1)
        ]
        used = sum(c.tokens for c in kept)
        return RecallResult(query=query, doc_ids=list(docs), max_tokens=max_tokens, total_tokens=used,
                            results=results)

    def bm25_options(self) -> dict[str, Any]:
        """Recall re-ranks with the sparse index's tokenizer and BM25 parameters (defaults without one)."""
        params = getattr(self.retrievers.get("sparse"), "params", None)
        if params is None:
            return {}
        return {"k1": params.k1, "b": params.b, "stopwords": params.stopwords, "stemming": params.stemming}
