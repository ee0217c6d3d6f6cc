"""Document tools: find the documents about a query, then recall their relevant passages."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from rollout.gateway.knowledge import DocumentSearchResult, KnowledgeBase, RecallResult
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.tool_params import KBDefault

Query = Annotated[str, Field(description="What to search for: a question, keywords or a name")]
MaxFiles = Annotated[int, Field(description="How many documents to return, 1 to 50")]
MaxTokens = Annotated[int, Field(description="Budget of whitespace-separated words to return")]
SEARCH_DESCRIPTION = "Document search: rank whole documents by keyword (BM25) relevance, without their text."
RECALL_DESCRIPTION = "Recall: read the passages of documents most relevant to a query, within a word budget."

DocIds = Annotated[
    list[str] | None,
    Field(description="Documents to read (doc_id values from search_documents); leave out or pass [] to "
                      "read the documents a search for the query finds"),
]


def _kb(ctx: Context) -> KnowledgeBase:
    return ctx.request_context.lifespan_context.kb


def search_documents(
    query: Query, ctx: Context, max_files: MaxFiles = KBDefault("default_max_files")
) -> DocumentSearchResult:
    """[Document Search] List the documents most relevant to a query, without their text.

    Returns document ids, titles and keyword (BM25) relevance scores, best first. Pass the ids
    to recall_documents to read the relevant passages.
    """
    try:
        return _kb(ctx).search_documents(query, max_files)
    except ValueError as e:
        raise ToolError(str(e)) from e


def recall_documents(
    query: Query, ctx: Context, max_tokens: MaxTokens = 4000, doc_ids: DocIds = None
) -> Annotated[CallToolResult, RecallResult]:
    """[Recall] Read the passages most relevant to a query, best first, within a word budget.

    Reads the given documents (or the documents a search for the query finds), splits long
    passages into chunks, ranks the chunks against the query and returns as many as fit in
    max_tokens words.
    """
    try:
        result = _kb(ctx).recall_documents(query, max_tokens, doc_ids)
    except ValueError as e:
        raise ToolError(str(e)) from e
    return CallToolResult(
        content=[TextContent(type="text", text=result.render())],
        structured_content=result.model_dump(mode="json"),
    )


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    registry.add("rag_search", search_documents, requires=("sparse",), description=SEARCH_DESCRIPTION,
                 stage="retrieval")
    registry.add("rag_recall", recall_documents, requires=("sparse",), description=RECALL_DESCRIPTION,
                 stage="chunking")
