"""BrowseComp-Plus' tools as its search agents see them: `search` over one retriever, and `get_document`.

`search(query)` ranks whole documents and returns the top k (5 unless the gateway file pins `k` in `fixed_params`,
which also takes it out of the schema the model reads, as BrowseComp-Plus' server offers `query` alone), each its
docid, its score and a snippet: the document's first `retriever.snippet.max_tokens` (512) tokens by the tokenizer
`retriever.snippet.tokenizer` names. `get_document(docid)` returns the document's whole text; an unknown docid is
a tool error the model reads. The text the model reads is the JSON BrowseComp-Plus' server sends (a list of
`{docid, score, snippet}`; `{docid, text}`); the structured content carries each returned document as `doc_id`, so
every call's record lists the docids it returned (`rollout.wire.result_ids`): a search's in rank order, a
get_document's its one.

One tool group per arm, so a gateway file picks the retriever: `bcp_bm25` and `bcp_dense` serve the tool named
`search` (one retriever, as in BrowseComp-Plus' runs); `bcp_search_bm25` and `bcp_search_dense` serve
`search_bm25` and `search_dense`, which one gateway offers together (the agent chooses per call, and the tool-call
reports count each); `bcp_get_document` serves `get_document`. BM25 ranks documents whole; dense ranks them as
`retriever.dense` says (one vector per document, or its best passage with `passage_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from rollout.gateway.knowledge import KnowledgeBase, Rank, RetrieverScore, SearchedQuery
from rollout.gateway.registry import ToolFn, ToolRegistry
from rollout.gateway.tool_params import KBDefault
from rollout.gateway.tools.documents import kb_of, text_result
from rollout.gateway.upstream import error_result
from rollout.llm.token_count import TokenCounter
from rollout.records import Passage
from rollout.retrieval.dense_shards import ShardUnavailable

Query = Annotated[str, Field(description="The search query")]
K = Annotated[int, Field(description="How many documents to return")]
K_DEFAULT = KBDefault("default_top_k")
DocId = Annotated[str, Field(description="The docid of the document to read, as a search result gave it")]

RANKING = {
    "sparse": ("BM25", "by the query's words (BM25 keyword matching)"),
    "dense": ("Dense", "by semantic similarity to the query (dense embeddings)"),
}
"""Each index's label and how it ranks, in the words the model reads."""


class DocumentSnippet(BaseModel):
    """One document a search returned."""

    doc_id: str = Field(description="The document's docid")
    score: RetrieverScore
    rank: Rank
    snippet: str = Field(description="The document's beginning, cut at the snippet's token limit")


class SnippetSearchResult(BaseModel):
    """Structured content of a search."""

    query: SearchedQuery
    retriever: str = Field(description="Which index ranked the documents: sparse (BM25) or dense")
    results: list[DocumentSnippet] = Field(description="Documents, best first")


class DocumentRef(BaseModel):
    """A document a call returned."""

    doc_id: str = Field(description="The document's docid")


class DocumentRead(BaseModel):
    """Structured content of get_document (its text is the call's text content, not repeated here)."""

    doc_id: str = Field(description="The document's docid")
    chars: int = Field(description="Characters of its text")
    results: list[DocumentRef] = Field(description="The document read, so the call's record lists it")


def document_text(parts: Sequence[Passage]) -> str:
    """A document's whole text from its passages (`KnowledgeBase.doc_passages`), title first when it has one.

    A BrowseComp-Plus document is one corpus row, kept whole (`rollout.data.browsecomp_plus`): its text is returned as
    it is. A corpus cut into chunks (a folder of files) has several rows per document, joined here by a blank
    line; their overlap (`chunk_overlap`) repeats words, so only such a corpus reads back inexactly."""
    text = "\n\n".join(p.text for p in parts)
    title = parts[0].title
    return f"{title}\n{text}" if title else text


CHARS_PER_TOKEN = 8
"""How many characters of a document `snippet` tokenizes first per token it wants (more when they do not hold
enough): a snippet needs the beginning of a document of tens of KB, and tokenizing it all costs 15 ms."""


def snippet(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest beginning of `text` that counts at most `max_tokens` tokens, as `counter.truncate` cuts the whole
    text, computed on as short a beginning as gives the same cut.

    A tokenizer splits at whitespace before it splits words (WordPiece's and byte-level BPE's pre-tokenizers): the
    tokens of a beginning are the whole text's, but for its last word, which may be cut short (and which a byte-level
    BPE joins to the space before it). So a cut that ends before that space is the whole text's cut."""
    window = max_tokens * CHARS_PER_TOKEN
    while window < len(text):
        head = text[:window]
        kept = head.rstrip()
        last_word = max(kept.rfind(" "), kept.rfind("\n"), kept.rfind("\t"))
        cut = counter.truncate(head, max_tokens)
        if len(cut) <= last_word:
            return cut
        window *= 2
    return counter.truncate(text, max_tokens)


def snippet_search(kb: KnowledgeBase, kind: str, query: str, k: int) -> SnippetSearchResult:
    """The k best documents for `query` by index `kind`, each with its snippet; a ValueError for the agent names a
    bad argument."""
    query = kb.check_query(query)
    if not 1 <= k <= kb.max_top_k:
        raise ValueError(f"k must be between 1 and {kb.max_top_k}, got {k}")
    counter = kb.snippet_counter()
    results = [
        DocumentSnippet(doc_id=doc, score=score, rank=rank,
                        snippet=snippet(counter, document_text(kb.doc_passages(doc)), kb.snippet_tokens))
        for rank, (doc, score, _) in enumerate(kb.rank_documents(kind, query, k), start=1)
    ]
    return SnippetSearchResult(query=query, retriever=kind, results=results)


def search_tool(kind: str, name: str) -> ToolFn:
    """A search tool named `name` over index `kind`."""

    def search(query: Query, ctx: Context, k: K = K_DEFAULT) -> Annotated[CallToolResult, SnippetSearchResult]:
        try:
            result = snippet_search(kb_of(ctx), kind, query, k)
        except ValueError as e:
            raise ToolError(str(e)) from e
        except ShardUnavailable as e:  # a dense shard on Ray Serve is down: the infrastructure failed, not the agent
            return error_result(str(e), outcome="upstream_unavailable")
        # What BrowseComp-Plus' server answers: the hits as a JSON list (FastMCP's rendering of a list result).
        hits = [{"docid": hit.doc_id, "score": hit.score, "snippet": hit.snippet} for hit in result.results]
        return text_result(json.dumps(hits, ensure_ascii=False, indent=2), result)

    label, ranking = RANKING[kind]
    # `search` alone does not say which index answers, as BrowseComp-Plus' does not: the arms of a comparison offer
    # the model the same tool; offered side by side, each says how it ranks.
    head = ("Search the document collection." if name == "search" else
            f"[{label} search] Search the document collection, ranking documents {ranking}.")
    search.__name__ = search.__qualname__ = name
    search.__doc__ = f"""{head}

    Returns the top documents, each with its docid, its score and a snippet: the beginning of the document, cut at
    a token limit. Read a whole document with get_document.
    """
    return search


def get_document(docid: DocId, ctx: Context) -> Annotated[CallToolResult, DocumentRead]:
    """Return the full text of a document, given its docid (as a search result gave it)."""
    kb = kb_of(ctx)
    doc = docid.strip()
    # Bounded as a query is (`KnowledgeBase.check_query`): the errors below echo the docid to the model.
    if len(doc) > kb.max_query_chars:
        raise ToolError(f"docid is {len(doc)} characters; the limit is {kb.max_query_chars}: pass a docid that a "
                        "search returned")
    try:  # one lookup of the docid (on a corpus store, a search of its document hashes)
        parts = kb.doc_passages(doc)
    except KeyError:
        raise ToolError(f"unknown docid {docid!r}: pass a docid that a search returned") from None
    text = document_text(parts)
    read = DocumentRead(doc_id=doc, chars=len(text), results=[DocumentRef(doc_id=doc)])
    return text_result(json.dumps({"docid": doc, "text": text}, ensure_ascii=False, indent=2), read)


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    for kind, group, name in (("sparse", "bcp_bm25", "search"), ("dense", "bcp_dense", "search"),
                              ("sparse", "bcp_search_bm25", "search_bm25"),
                              ("dense", "bcp_search_dense", "search_dense")):
        label, ranking = RANKING[kind]
        registry.add(group, search_tool(kind, name), requires=(kind,), stage="retrieval",
                     description=f"BrowseComp-Plus' {name} ({label}): documents ranked {ranking}, each with a "
                                 "snippet of its beginning.")
    registry.add("bcp_get_document", get_document, stage="retrieval",
                 description="BrowseComp-Plus' get_document: a document's full text by its docid.")
