"""The RAG pipeline's step tools (see `rollout.gateway.steps`): one tool group per step, and one retrieve group
per index, so a gateway file assembles a pipeline and the mode comparison extends to pipelines.

Groups: `rag_retrieve_dense` / `rag_retrieve_sparse` / `rag_retrieve_hybrid` (retrieve_documents),
`rag_filter` (filter_documents), `rag_chunk` (chunk_documents), `rag_generate` (generate_answer),
`rag_sources` (search_sources) and `rag_visualize` (visualize_doc_relevance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from rollout.gateway.knowledge import KnowledgeBase, Rank, RecallResult, SearchedQuery, SourceDocId
from rollout.gateway.registry import ToolFn, ToolRegistry
from rollout.gateway.steps import (
    ANSWER_CONTEXT_TOKENS,
    ANSWER_SYSTEM,
    FILTER_DOC_TOKENS,
    FILTER_PROMPT,
    EndpointFailed,
    StepLLM,
    cosine_to_score,
    in_scope,
    parse_score,
    source_scope,
)
from rollout.gateway.tool_params import KBDefault
from rollout.gateway.tools.documents import NO_DOCS, RANKING, kb_of, text_result
from rollout.gateway.toolsets import toolset_scope_of
from rollout.gateway.upstream import error_result
from rollout.gateway_file import FILTER_GROUP, GENERATE_GROUP, VISUALIZE_GROUP
from rollout.relevance_view import RelevanceRow, render_relevance
from rollout.retrieval.dense_shards import ShardUnavailable
from rollout.retrieval.recall import bm25_scores

Query = Annotated[str, Field(description="The question or search words")]
MaxDocs = Annotated[int, Field(description="How many documents to return, 1 to 50")]
DocIds = Annotated[list[str], Field(description="doc_id values an earlier step returned")]
Threshold = Annotated[int, Field(description="Documents scoring at least this (0-10) are relevant")]
TokenLimit = Annotated[int, Field(description="Budget of tokens (the gateway tokenizer's) to return")]
# Optional parameters are their plain type with a default that means "not given" ("" or []), never `X | None`:
# strict function-calling clients refuse a property without a `type`, and small models follow a typed field
# with a default better than an anyOf.
ChunkQuery = Annotated[str, Field(description="Rank the chunks against this query; leave out (or \"\") to keep "
                                              "the documents' order")]
Model = Annotated[str, Field(description="Model to answer with; leave out (or \"\") for the gateway's configured "
                                         "model")]
SourcePath = Annotated[str, Field(description="Folder (or file) of the corpus to search, relative to its root, e.g. "
                                              "'guides'; leave out (or \"\") for the whole corpus")]
Recursive = Annotated[bool, Field(description="Also search the folder's sub-folders")]
OptionalDocIds = Annotated[list[str], Field(description="Documents to show; leave out (or []) to show the last "
                                                        "retrieve, filter or source search of this task")]
MAX_DOCS_DEFAULT = KBDefault("default_max_docs")
OptionalQuery = Annotated[str, Field(description="Score the documents against this query (offline scorer); leave "
                                                 "out (or \"\") to keep the scores of the last result")]


class Candidate(BaseModel):
    """A document a retrieval step found; no text."""

    id: str = Field(description="Document id (the same as doc_id)")
    doc_id: str = Field(description="Source document id; pass it to the next step")
    title: str = Field(description="Title of the document's best-matching passage")
    score: float = Field(description="Retriever score of that passage (higher is better; scales differ)")
    rank: Rank
    tokens: int = Field(description="Size of the whole document in tokens (the gateway tokenizer's)")


class CandidateList(BaseModel):
    """Structured content of retrieve_documents and search_sources."""

    query: SearchedQuery
    retriever: str = Field(description="Which index ranked them: dense, sparse, hybrid, or sources (BM25 in a folder)")
    path: str | None = Field(default=None, description="The corpus folder searched (search_sources)")
    results: list[Candidate] = Field(description="Documents, best first")


class Relevance(BaseModel):
    """One document's relevance to the query."""

    doc_id: SourceDocId
    title: str = Field(description="Document title")
    relevance: int = Field(description="0 (useless) to 10 (answers the question)")
    is_relevant: bool = Field(description="relevance >= the threshold")


class FilterResult(BaseModel):
    """Structured content of filter_documents."""

    query: str = Field(description="The query the documents were scored against")
    threshold: int = Field(description="Relevance a document needs to count as relevant")
    scorer: str = Field(description="What scored them: llm:<model>, or encoder (offline cosine mapping)")
    results: list[Relevance] = Field(description="Documents, most relevant first (ties keep the order given)")
    relevant_doc_ids: list[str] = Field(description="The relevant documents' ids, most relevant first")


class GeneratedAnswer(BaseModel):
    """Structured content of generate_answer."""

    query: str = Field(description="The question answered")
    answer: str = Field(description="The answer; empty when the reader found none")
    doc_ids: list[str] = Field(description="Documents the answer was generated from")
    reader: str = Field(description="llm:<model>, or extractive (offline span reader)")
    context_tokens: int = Field(description="Tokens of the documents' text given to the reader")
    truncated: bool = Field(default=False, description="True when the LLM reader's answer was cut at its token "
                                                       "limit, so it may be incomplete")


def _task(ctx: Context) -> Any:
    scope = toolset_scope_of(ctx.request_context.params)
    return None if scope.task_id is None else scope


def _as_tool_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn`'s result; bad arguments become a tool error for the agent, and a failed LLM endpoint (or a dense shard
    on Ray Serve that is down) an error marked `upstream_unavailable`: the tool could not do its work, so the task is
    recorded as an infrastructure failure, not as answered without it."""
    try:
        return fn(*args, **kwargs)
    except ValueError as e:
        raise ToolError(str(e)) from e
    except (EndpointFailed, ShardUnavailable) as e:  # an LLM endpoint, or a dense shard on Ray Serve, is down
        return error_result(str(e), outcome="upstream_unavailable")


def _candidates(kb: KnowledgeBase, ctx: Context, query: str, retriever: str, ranked: Sequence[tuple[str, float, int]],
                source: str, path: str | None = None) -> CallToolResult:
    results = [Candidate(id=doc, doc_id=doc, title=kb.passages[row].title, score=score, rank=i,
                         tokens=kb.doc_tokens(doc)) for i, (doc, score, row) in enumerate(ranked, start=1)]
    rows = [RelevanceRow(c.doc_id, c.title, c.score, tokens=c.tokens) for c in results]
    source = f"{source}, {retriever}"  # shown again by visualize_doc_relevance as it was first shown
    kb.recent.remember(_task(ctx), source, query, rows)
    listing = CandidateList(query=query, retriever=retriever, path=path, results=results)
    return text_result(render_relevance(query, rows, source=source), listing)


def retrieve_tool(kind: str) -> ToolFn:
    """`retrieve_documents` on index `kind`."""

    def retrieve_documents(
        query: Query, ctx: Context, max_docs: MaxDocs = MAX_DOCS_DEFAULT
    ) -> Annotated[CallToolResult, CandidateList]:
        kb = kb_of(ctx)

        def run() -> CallToolResult:
            q = kb.check_query(query)
            n = kb.check_count("max_docs", max_docs, kb.default_max_docs)
            return _candidates(kb, ctx, q, kind, kb.rank_documents(kind, q, n), "retrieve_documents")

        return _as_tool_error(run)

    retrieve_documents.__doc__ = f"""[Retrieve] Step 1 of the pipeline: find candidate documents for a query.

    Ranks whole documents by {RANKING[kind]} and returns their ids, titles, scores and sizes in
    tokens, without their text. Pass the ids to filter_documents, chunk_documents or generate_answer.
    """
    return retrieve_documents


def filter_documents(query: Query, doc_ids: DocIds, ctx: Context,
                     relevance_threshold: Threshold = 5) -> Annotated[CallToolResult, FilterResult]:
    """[Filter] Step 2: score each document's relevance to the query from 0 to 10 and keep the relevant ones.

    Returns every document with its score and is_relevant (score >= relevance_threshold), most
    relevant first, and the relevant ids. Pass those to chunk_documents or generate_answer.
    """
    kb = kb_of(ctx)

    def run() -> CallToolResult:
        q = kb.check_query(query)
        docs = kb.check_doc_ids(doc_ids, "retrieve_documents")
        if not 0 <= relevance_threshold <= 10:
            raise ValueError(f"relevance_threshold must be between 0 and 10, got {relevance_threshold}")
        scorer, scores = _score_documents(kb, q, docs)
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))
        results = [Relevance(doc_id=docs[i], title=kb.doc_passages(docs[i])[0].title, relevance=scores[i],
                             is_relevant=scores[i] >= relevance_threshold) for i in order]
        rows = [RelevanceRow(r.doc_id, r.title, r.relevance, r.is_relevant) for r in results]
        kb.recent.remember(_task(ctx), "filter_documents", q, rows, scale=10)
        result = FilterResult(query=q, threshold=relevance_threshold, scorer=scorer, results=results,
                              relevant_doc_ids=[r.doc_id for r in results if r.is_relevant])
        view = render_relevance(q, rows, source=f"filter_documents, {scorer}", scale=10, threshold=relevance_threshold)
        return text_result(view, result)

    return _as_tool_error(run)


def _score_documents(kb: KnowledgeBase, query: str, docs: list[str]) -> tuple[str, list[int]]:
    llm = kb.steps.llm
    if llm is not None:
        requests = []
        for doc in docs:
            text = "\n\n".join(c.text for c in kb.read_documents(query, [doc], FILTER_DOC_TOKENS, "").results)
            requests.append([{"role": "user", "content": FILTER_PROMPT.format(query=query, doc_id=doc, text=text)}])
        replies = StepLLM(llm).complete(requests, max_tokens=8)
        return f"llm:{llm.model}", [parse_score(r.text) or 0 for r in replies]
    if not kb.steps.offline:
        raise ValueError("filter_documents has no LLM endpoint to score with (set llm.model and llm.base_url) and "
                         "the offline scorer is switched off (gateway.offline_steps=false)")
    return "encoder", encoder_scores(kb, query, docs)


def encoder_scores(kb: KnowledgeBase, query: str, docs: Sequence[str]) -> list[int]:
    """Each document's offline relevance: its best passage's cosine with the query, as a 0-10 score."""
    encoder = getattr(kb.retrievers.get("dense"), "encoder", None)
    if encoder is None:
        raise ValueError("scoring documents offline needs the dense index's encoder, which this gateway has not "
                         "loaded: visualize_doc_relevance shows them unscored if you leave query out; "
                         "filter_documents then needs an LLM endpoint (llm.model and llm.base_url)")
    passages = [(i, p) for i, doc in enumerate(docs) for p in kb.doc_passages(doc)]
    query_vector = encoder.encode_queries([query])[0]
    vectors = encoder.encode_passages([p.contents for _, p in passages])
    best = np.full(len(docs), -1.0, dtype=np.float32)
    for (i, _), cosine in zip(passages, vectors @ query_vector, strict=True):
        best[i] = max(best[i], float(cosine))
    return [cosine_to_score(float(c)) for c in best]


def chunk_documents(doc_ids: DocIds, ctx: Context, token_limit: TokenLimit = 2000,
                    query: ChunkQuery = "") -> Annotated[CallToolResult, RecallResult]:
    """[Chunk] Step 3: read the documents' passages, cut into chunks, within a token budget.

    Long passages are split into chunks; with a query the chunks are re-ranked against it (by
    keywords), best first; the chunks are returned until token_limit tokens are used.
    """
    kb = kb_of(ctx)

    def run() -> CallToolResult:
        q = kb.check_query(query) if query.strip() else None
        docs = kb.check_doc_ids(doc_ids, "retrieve_documents")
        result = kb.read_documents(q, docs, token_limit, "token_limit")
        return text_result(result.render(), result)

    return _as_tool_error(run)


def generate_answer(query: Query, doc_ids: DocIds, ctx: Context,
                    model: Model = "") -> GeneratedAnswer:
    """[Generate] Step 4: answer the question from the given documents only.

    The gateway's reader reads the documents' chunks most relevant to the question and answers
    briefly. The offline reader returns the best span of the kind the question asks for (a name, a
    year, a number...), empty when the documents hold none; it does not judge whether they answer.
    """
    kb = kb_of(ctx)

    def run() -> GeneratedAnswer:
        from rollout.question_reading import (
            Evidence,
            extract_answer,
            plan_question,
        )

        q = kb.check_query(query)
        docs = kb.check_doc_ids(doc_ids, "retrieve_documents")
        chunks = kb.read_documents(q, docs, ANSWER_CONTEXT_TOKENS, "").results
        context = sum(c.tokens for c in chunks)
        llm = kb.steps.llm
        if llm is not None:
            documents = "\n\n".join(f"[{c.doc_id}] {c.title}\n{c.text}" for c in chunks)
            messages = [{"role": "system", "content": ANSWER_SYSTEM},
                        {"role": "user", "content": f"Documents:\n{documents}\n\nQuestion: {q}"}]
            [reply] = StepLLM(llm).complete([messages], model=model)
            answer = reply.text.strip()
            return GeneratedAnswer(query=q, answer="" if answer.lower() == "unknown" else answer, doc_ids=docs,
                                   reader=f"llm:{model or llm.model}", context_tokens=context,
                                   truncated=reply.truncated)
        if not kb.steps.offline:
            raise ValueError("generate_answer has no LLM endpoint configured (set llm.model and llm.base_url) and "
                             "the offline reader is switched off (gateway.offline_steps=false)")
        evidence = [Evidence(c.title, c.text, i) for i, c in enumerate(chunks)]
        found = extract_answer(q, plan_question(q).answer_type, evidence)
        return GeneratedAnswer(query=q, answer="" if found is None else found.text, doc_ids=docs,
                               reader="extractive", context_tokens=context)

    return _as_tool_error(run)


def search_sources(query: Query, ctx: Context, path: SourcePath = "", recursive: Recursive = True,
                   max_docs: MaxDocs = MAX_DOCS_DEFAULT) -> Annotated[CallToolResult, CandidateList]:
    """[Search Sources] Find documents by keywords within one folder of the source files.

    Documents are files of the corpus folder, named by their path; the search ranks the files
    under path (and its sub-folders unless recursive is false) by keyword (BM25) relevance.
    """
    kb = kb_of(ctx)

    def run() -> CallToolResult:
        q = kb.check_query(query)
        n = kb.check_count("max_docs", max_docs, kb.default_max_docs)
        scope = source_scope(kb.steps.sources_root, path)
        # Only a folder corpus has paths to scope by; other ids may hold "/" (say "AC/DC") and are all searched.
        folder = kb.steps.sources_root is not None
        docs = [doc for doc in kb.doc_rows() if not folder or in_scope(doc, scope, recursive)]
        if not docs:
            raise ValueError(f"no documents under {path!r}; pass a folder of the corpus, or leave path out")
        return _candidates(kb, ctx, q, "sources", rank_in_scope(kb, q, docs)[:n], "search_sources", scope or None)

    return _as_tool_error(run)


def rank_in_scope(kb: KnowledgeBase, query: str, docs: Sequence[str]) -> list[tuple[str, float, int]]:
    """(document, best passage BM25 score, row) of `docs`, scored over their passages alone, best first;
    documents sharing no word with the query are left out."""
    rows = [row for doc in docs for row in kb.doc_rows()[doc]]
    scores = bm25_scores(query, [kb.passages[r].contents for r in rows], **kb.bm25_options())
    return kb.best_per_document((row, score) for row, score in zip(rows, scores, strict=True) if score > 0)


def visualize_doc_relevance(ctx: Context, doc_ids: OptionalDocIds = NO_DOCS, query: OptionalQuery = "") -> str:
    """[Visualize] Show documents and their relevance scores as a compact text chart.

    Without doc_ids, shows the last retrieve_documents, filter_documents or search_sources result of
    this task. With doc_ids, shows those documents: with their scores from that last result, or
    scored against query when one is given.
    """
    kb = kb_of(ctx)

    def run() -> str:
        last = kb.recent.last(_task(ctx))
        if not doc_ids:
            if last is None:
                raise ValueError("no earlier retrieve, filter or source search in this task to show; pass doc_ids "
                                 "(and a query to score them against)")
            source, q, rows, scale = last
            return render_relevance(q, rows, source=source, scale=scale)
        docs = kb.check_doc_ids(doc_ids, "retrieve_documents")
        if query and query.strip():
            q = kb.check_query(query)
            scores = encoder_scores(kb, q, docs)
            rows = [RelevanceRow(d, kb.doc_passages(d)[0].title, s) for d, s in zip(docs, scores, strict=True)]
            return render_relevance(q, rows, source="encoder", scale=10)
        known = {r.doc_id: r for r in (last[2] if last else [])}
        rows = [known.get(d) or RelevanceRow(d, kb.doc_passages(d)[0].title, None) for d in docs]
        return render_relevance(last[1] if last else None, rows, source=last[0] if last else "not scored",
                                scale=last[3] if last else None)

    return _as_tool_error(run)


def register(registry: ToolRegistry) -> None:
    """Add this module's tool groups to `registry`."""
    for kind in RANKING:
        registry.add(f"rag_retrieve_{kind}", retrieve_tool(kind), requires=(kind,), stage="retrieval",
                     description=f"Pipeline step 1: retrieve candidate documents by {RANKING[kind]}.")
    registry.add(FILTER_GROUP, filter_documents, requires=("dense",), stage="filtering",
                 description="Pipeline step 2: score documents 0-10 for relevance and keep the relevant ones.")
    registry.add("rag_chunk", chunk_documents, stage="chunking",
                 description="Pipeline step 3: read documents as chunks re-ranked against a query, within a token budget.")
    registry.add(GENERATE_GROUP, generate_answer, stage="generation",
                 description="Pipeline step 4: answer a question from given documents with the gateway's reader.")
    registry.add("rag_sources", search_sources, stage="retrieval",
                 description="Search the files of one folder of the corpus by keywords.")
    registry.add(VISUALIZE_GROUP, visualize_doc_relevance, stage="other",
                 description="Show documents and their relevance scores as a compact text chart.")
