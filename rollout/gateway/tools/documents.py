"""Document tools: find the documents about a query, then recall their relevant passages.

Each comes in one tool group per index, so a gateway file picks the retriever the way it picks a
passage-search tool: `rag_search` / `rag_recall` rank documents by keyword (BM25), `rag_search_dense` /
`rag_recall_dense` by embedding similarity, `rag_search_hybrid` / `rag_recall_hybrid` by both, fused.
The tools keep their names (`search_documents`, `recall_documents`) whichever index answers, so one
prompt serves every arm of a comparison; a gateway serves one group of each.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from rollout.gateway.knowledge import DocumentSearchResult, KnowledgeBase, RecallResult
from rollout.gateway.registry import ToolFn, ToolRegistry
from rollout.gateway.tool_params import KBDefault
from rollout.gateway.upstream import error_result
from rollout.retrieval.dense_shards import ShardUnavailable

Query = Annotated[str, Field(description="What to search for: a question, keywords or a name")]
MaxFiles = Annotated[int, Field(description="How many documents to return, 1 to 50")]
MAX_FILES_DEFAULT = KBDefault("default_max_docs")
MaxTokens = Annotated[int, Field(description="Budget of tokens (the gateway tokenizer's) to return")]
DocIds = Annotated[
    list[str],
    Field(description="Documents to read (doc_id values from search_documents); leave out or pass [] to "
                      "read the documents a search for the query finds"),
]
NO_DOCS: list[str] = []
"""The default of an optional list of documents, meaning "none given" (never mutated: tools only read it). A
plain array with a default, not `list[str] | None`: strict function-calling clients refuse a property without
a `type`."""

RANKING = {
    "sparse": "keyword (BM25) relevance",
    "dense": "semantic (embedding) similarity",
    "hybrid": "keyword and semantic relevance fused by reciprocal rank",
}
"""How each index ranks, in the words the model reads."""
GROUP_SUFFIX = {"sparse": "", "dense": "_dense", "hybrid": "_hybrid"}
"""`rag_search` + suffix: the sparse groups keep their original names."""


def kb_of(ctx: Context) -> KnowledgeBase:
    return ctx.request_context.lifespan_context.kb


def text_result(text: str, model: BaseModel) -> CallToolResult:
    """A result whose text is written for the model (not the JSON of its structured content), with `model` as
    the structured content."""
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=model.model_dump(mode="json"))


def search_tool(kind: str) -> ToolFn:
    """`search_documents` on index `kind`."""

    def search_documents(
        query: Query, ctx: Context, max_files: MaxFiles = MAX_FILES_DEFAULT
    ) -> DocumentSearchResult:
        try:
            return kb_of(ctx).search_documents(query, max_files, kind=kind)
        except ValueError as e:
            raise ToolError(str(e)) from e
        except ShardUnavailable as e:  # a dense shard on Ray Serve is down: the infrastructure failed, not the agent
            return error_result(str(e), outcome="upstream_unavailable")

    search_documents.__doc__ = f"""[Document Search] List the documents most relevant to a query, without their text.

    Returns document ids, titles and {RANKING[kind]} scores, best first. Pass the ids
    to recall_documents to read the relevant passages.
    """
    return search_documents


def recall_tool(kind: str) -> ToolFn:
    """`recall_documents`, finding documents on index `kind` when none are given."""

    def recall_documents(
        query: Query, ctx: Context, max_tokens: MaxTokens = 4000, doc_ids: DocIds = NO_DOCS
    ) -> Annotated[CallToolResult, RecallResult]:
        try:
            result = kb_of(ctx).recall_documents(query, max_tokens, doc_ids, kind=kind)
        except ValueError as e:
            raise ToolError(str(e)) from e
        except ShardUnavailable as e:  # a dense shard on Ray Serve is down: the infrastructure failed, not the agent
            return error_result(str(e), outcome="upstream_unavailable")
        return text_result(result.render(), result)

    recall_documents.__doc__ = f"""[Recall] Read the passages most relevant to a query, best first, within a token budget.

    Reads the given documents (or the documents a search by {RANKING[kind]} finds), splits long
    passages into chunks, ranks the chunks against the query by keywords and returns as many as
    fit in max_tokens tokens.
    """
    return recall_documents


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    for kind, suffix in GROUP_SUFFIX.items():
        registry.add(f"rag_search{suffix}", search_tool(kind), requires=(kind,), stage="retrieval",
                     description=f"Document search: rank whole documents by {RANKING[kind]}, without their text.")
        registry.add(f"rag_recall{suffix}", recall_tool(kind), requires=(kind,), stage="chunking",
                     description=f"Recall: read the passages of documents found by {RANKING[kind]} (or named), "
                                 "within a token budget.")
