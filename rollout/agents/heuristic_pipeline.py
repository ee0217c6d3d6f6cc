"""The heuristic agent's policy for a RAG pipeline of step tools: retrieve → filter → chunk → generate.

A gateway file such as ``rag_pipeline.json`` offers the pipeline's steps as separate tools
(`rollout.gateway.tools.pipeline`). When at least ``retrieve_documents`` and ``chunk_documents``
are offered, the heuristic agent walks the steps in order instead of searching passages:

1. ``retrieve_documents(query, max_docs=top_k)``: candidate documents (ids and titles, no text);
2. ``filter_documents(query, doc_ids)`` when offered: a 0-10 relevance per document, at the tool's
   own threshold. The documents it keeps go on. When it keeps none, or fails, the retrieved
   documents go on instead, in retrieval order: reading nothing could only end in a guess, and a
   filter that drops every candidate more likely has a strict threshold than a useless search;
3. ``chunk_documents(doc_ids, query=query)``: those documents' chunks, best first;
4. ``generate_answer(query, doc_ids)`` when offered: the gateway's reader answers from the same
   documents. Its answer is the agent's. When it is empty, fails or the tool is not offered, the
   agent reads the chunks of step 3 itself (`extract_answer`).

A two-hop question (`QuestionPlan.bridge`) resolves the bridge first with steps 1-3 and the agent's
own reading of the chunks — ``generate_answer`` answers a question, while the bridge needs a span
of the bridge's kind read against the bridge query — then sends the resolved question through
steps 1-4. A bridge that cannot be resolved leaves the question as written.

A failed retrieval is retried once with the query cut to keywords, as in the other modes.

Turn budget: each step is one turn and the answer is the last, so a one-hop question takes 5
turns and a two-hop one 8. The agent's ``pipeline_max_turns`` bounds a pipeline episode and
``max_turns`` every other, so the other modes' runs do not change with it. Steps are taken in
order until the budget is spent; a step with no turn left counts as not offered (the fallbacks
above), and a question whose final retrieval gets no turn is answered as without tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rollout.question_reading import (
    Evidence,
    QuestionPlan,
    extract_answer,
    guess_without_evidence,
    keywords,
)
from rollout.records import ToolResult
from rollout.wire import Hit, result_hits

RETRIEVE, FILTER, CHUNK, GENERATE = "retrieve_documents", "filter_documents", "chunk_documents", "generate_answer"
_PARAMETERS = {RETRIEVE: ("query",), FILTER: ("query", "doc_ids"), CHUNK: ("doc_ids",),
               GENERATE: ("query", "doc_ids")}
"""Each step tool's name and the parameters the agent passes it; a tool of that name without them
is not taken for the step."""


class StepCaller(Protocol):
    """What the pipeline policy needs of an episode: calling a tool as one turn."""

    async def call_named(self, name: str, arguments: dict[str, Any]) -> ToolResult | None:
        """Call a tool as one turn; None when the turn budget is spent."""
        ...


@dataclass(frozen=True, slots=True)
class PipelineTools:
    """The step tools offered, by name."""

    retrieve: str
    chunk: str
    filter: str | None
    """None when the gateway offers no filter step."""
    generate: str | None
    """None when the gateway offers no generate step."""
    takes_max_docs: bool
    """Whether retrieve's schema has a `max_docs` parameter."""


def find_pipeline_tools(tool_specs: list[dict[str, Any]]) -> PipelineTools | None:
    """The pipeline's step tools among those offered; None unless retrieve and chunk both are."""
    offered: dict[str, set[str]] = {}
    for spec in tool_specs:
        function = spec.get("function", spec) if isinstance(spec, dict) else {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        name = function.get("name")
        if name in _PARAMETERS and isinstance(properties, dict) and set(_PARAMETERS[name]) <= set(properties):
            offered[name] = set(properties)
    if RETRIEVE not in offered or CHUNK not in offered:
        return None
    return PipelineTools(RETRIEVE, CHUNK, FILTER if FILTER in offered else None,
                         GENERATE if GENERATE in offered else None, "max_docs" in offered[RETRIEVE])


def _structured(result: ToolResult | None) -> dict[str, Any]:
    """A successful call's structured content; empty for a failed, skipped or unstructured one."""
    if result is None or not result.ok or not isinstance(result.structured, dict):
        return {}
    return result.structured


def _hits(result: ToolResult | None) -> list[Hit]:
    """A successful call's items; none for a failed, skipped or unstructured one."""
    return result_hits(_structured(result)) or []


def _doc_ids(values: Any) -> list[str]:
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


class _Pipeline:
    """The steps of one episode, each a turn, each falling back when its tool fails or is missing."""

    def __init__(self, tools: PipelineTools, episode: StepCaller, top_k: int) -> None:
        self.tools = tools
        self.episode = episode
        self.top_k = top_k

    async def retrieve(self, query: str) -> list[str] | None:
        """Document ids, best first; None when no turn was left to search with."""
        arguments: dict[str, Any] = {"query": query}
        if self.tools.takes_max_docs:
            arguments["max_docs"] = self.top_k
        result = await self.episode.call_named(self.tools.retrieve, arguments)
        if result is not None and not result.ok:
            result = await self.episode.call_named(self.tools.retrieve, {**arguments, "query": keywords(query)})
        if result is None:
            return None
        return [hit.doc_id for hit in _hits(result) if hit.doc_id is not None]

    async def filter(self, query: str, docs: list[str]) -> list[str]:
        """The documents the filter keeps, most relevant first; `docs` itself when it keeps none (see the
        module docstring), fails, is not offered or gets no turn."""
        if self.tools.filter is None or not docs:
            return docs
        result = await self.episode.call_named(self.tools.filter, {"query": query, "doc_ids": docs})
        return _doc_ids(_structured(result).get("relevant_doc_ids")) or docs

    async def chunk(self, query: str, docs: list[str]) -> list[Evidence]:
        """The documents' chunks ranked against the query, as passages to read (rank 0 for the best)."""
        if not docs:
            return []
        result = await self.episode.call_named(self.tools.chunk, {"doc_ids": docs, "query": query})
        chunks = [c for c in _hits(result) if c.text is not None]
        return [Evidence(c.title or "", c.text, i) for i, c in enumerate(chunks)]

    async def generate(self, query: str, docs: list[str]) -> str:
        """The gateway reader's answer; "" when it has none, fails, is not offered or gets no turn."""
        if self.tools.generate is None or not docs:
            return ""
        result = await self.episode.call_named(self.tools.generate, {"query": query, "doc_ids": docs})
        answer = _structured(result).get("answer")
        return answer.strip() if isinstance(answer, str) else ""

    async def read(self, query: str) -> tuple[list[str], list[Evidence]] | None:
        """Steps 1-3 for one query: the documents kept and their chunks; None when retrieval got no turn."""
        found = await self.retrieve(query)
        if found is None:
            return None
        docs = await self.filter(query, found)
        return docs, await self.chunk(query, docs)


async def answer_with_pipeline(plan: QuestionPlan, tools: PipelineTools, episode: StepCaller, top_k: int) -> str:
    """The answer the pipeline's steps give (see the module docstring for the order and the fallbacks)."""
    pipeline = _Pipeline(tools, episode, top_k)
    question = plan.question
    if plan.bridge is not None:
        bridge = await pipeline.read(plan.bridge.query)
        entity = extract_answer(plan.bridge.query, plan.bridge.answer_type, bridge[1]) if bridge else None
        if entity is not None:
            question = plan.resolved(entity.text)
    main = await pipeline.read(question)
    if main is None:
        return guess_without_evidence(plan)
    docs, chunks = main
    answer = await pipeline.generate(question, docs)
    if answer:
        return answer
    own = extract_answer(question, plan.answer_type, chunks)
    return own.text if own is not None else ""
