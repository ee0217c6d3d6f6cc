"""An offline, deterministic policy that answers with whatever retrieval tools it is offered.

It stands in for a language model when none is reachable, so that every mode of the harness
can run and be scored. It reads only the question and the tool surface — never gold answers.

Tools. A tool is a retrieval tool when its schema takes a string ``query``. Its name and
description say which kind it is: "dense", "semantic", "vector" or "embedding" mean dense;
"sparse", "bm25", "keyword" or "lexical" mean sparse. Tools without a ``query`` parameter
(e.g. corpus information) are never called, nor are tools that say they list documents
"without their text". With no retrieval tool the agent answers from the question alone in one
turn — the no-tool baseline.

Tool sets. When no retrieval tool is offered but ``list_toolsets`` and ``activate_toolset``
are, the agent lists the sets and activates, in one call, every inactive set that searches and
returns text, so that routing and the retry on the other kind work as when both kinds are
offered; then it looks at the tools it is offered again. Both calls are turns.

Routing (when both kinds are offered). A query that contains an identifier-like token — one
mixing letters and digits, such as ``ORG-5521`` or ``P-48213`` — or a quoted string goes to
the sparse tool, because exact tokens are what keyword matching is good at and what an
encoder blurs; every other query goes to the dense tool. With one kind offered, everything
goes there.

Pipelines. When the gateway offers the RAG pipeline's step tools (``retrieve_documents`` and
``chunk_documents``, with ``filter_documents`` and ``generate_answer`` when offered), the agent
walks them in order — retrieve, filter, chunk, generate — as `rollout.agents.heuristic_pipeline`
describes, within ``pipeline_max_turns`` turns instead of ``max_turns``: a two-hop question takes
seven calls and the answer there, while one search per hop is enough elsewhere.

Steps. A question with a nested reference ("In which city was the founder of X born?") is
answered in two hops: first a query that resolves "the founder of X", then the question with
that entity substituted. Each tool call is one turn and the answer is the last turn, so at
most ``max_turns - 1`` calls are made. A failed call (``ToolResult(ok=False)``) is retried
once: on the other retrieval tool when there is one, else with the query cut to keywords.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from rollout.agents.base import AgentResult, TaskTools, query_functions
from rollout.agents.heuristic_pipeline import answer_with_pipeline, find_pipeline_tools
from rollout.answer_tag import refuse_answer_tag
from rollout.events import EventLog, LLMOutputEvent
from rollout.question_reading import (
    IDENTIFIER,
    Evidence,
    QuestionPlan,
    extract_answer,
    guess_without_evidence,
    keywords,
    plan_question,
)
from rollout.records import ToolResult
from rollout.wire import result_hits

logger = logging.getLogger(__name__)

_DENSE_WORDS = ("dense", "semantic", "vector", "embedding")
_SPARSE_WORDS = ("sparse", "bm25", "keyword", "lexical")
_LISTING_WORDS = ("without their text", "without text")
_SEARCH_WORDS = ("search", "retriev", "recall", "query")


@dataclass(frozen=True, slots=True)
class RetrievalTool:
    """A tool the agent can search with."""

    name: str
    kind: str
    """"dense", "sparse" or "other" (takes a query, kind not stated)."""
    takes_top_k: bool
    """Whether the schema has a `top_k` parameter."""


def find_retrieval_tools(tool_specs: list[dict[str, Any]]) -> list[RetrievalTool]:
    """The offered tools that take a string `query`, with the kind their name or description states."""
    found = []
    for function in query_functions(tool_specs):
        properties = function["parameters"]["properties"]
        words = f"{function.get('name', '')} {function.get('description', '')}".lower()
        if any(w in words for w in _LISTING_WORDS):
            continue
        kind = ("sparse" if any(w in words for w in _SPARSE_WORDS)
                else "dense" if any(w in words for w in _DENSE_WORDS) else "other")
        found.append(RetrievalTool(str(function["name"]), kind, "top_k" in properties))
    return found


def route(query: str, tools: list[RetrievalTool]) -> list[RetrievalTool]:
    """Tools to try for a query, best first (see the module docstring for the rule)."""
    first = "sparse" if IDENTIFIER.search(query) else "dense"
    order = {first: 0, "other": 1}
    return sorted(tools, key=lambda t: order.get(t.kind, 2))


def pick_toolsets(listing: dict[str, Any] | None) -> list[str]:
    """The inactive tool sets to activate from a `list_toolsets` result: those that search and return text,
    in listing order (none when no inactive set does)."""
    sets = [t for t in (listing or {}).get("toolsets", []) if isinstance(t, dict) and isinstance(t.get("name"), str)]
    words = {t["name"]: f"{t['name']} {t.get('description', '')} {' '.join(map(str, t.get('tools', [])))}".lower()
             for t in sets if not t.get("active")}
    return [name for name, text in words.items()
            if any(w in text for w in _SEARCH_WORDS) and not any(w in text for w in _LISTING_WORDS)]


def evidence_from(result: ToolResult) -> list[Evidence]:
    """Passages from a search result: its structured hits, else its text split into blocks."""
    hits = result_hits(result.structured)
    if hits is not None:
        return [Evidence(hit.title or "", hit.text, i if hit.rank is None else hit.rank)
                for i, hit in enumerate(hits) if hit.text is not None]
    blocks = [b.strip() for b in result.text.split("\n\n") if b.strip()]
    return [Evidence("", block, i) for i, block in enumerate(blocks)]


class _Episode:
    """One question: the conversation so far and the turn budget."""

    def __init__(self, question: str, tools: TaskTools, events: EventLog, max_turns: int, top_k: int) -> None:
        self.tools = tools
        self.events = events
        self.top_k = top_k
        self.calls_left = max_turns - 1  # the last turn is the answer
        self.tool_rounds = 0
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": tools.system_prompt},
            {"role": "user", "content": question},
        ]

    async def call(self, tool: RetrievalTool, query: str) -> ToolResult | None:
        """Call one retrieval tool as one turn; None when the turn budget is spent."""
        arguments: dict[str, Any] = {"query": query}
        if tool.takes_top_k:
            arguments["top_k"] = self.top_k
        return await self.call_named(tool.name, arguments)

    async def call_named(self, name: str, arguments: dict[str, Any]) -> ToolResult | None:
        """Call any tool as one turn; None when the turn budget is spent."""
        if self.calls_left <= 0:
            return None
        self.calls_left -= 1
        call_id = f"call_{self.tool_rounds}"
        self.tool_rounds += 1
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}]})
        self.events.emit(LLMOutputEvent(
            turn=self.tool_rounds, tool_calls=[{"id": call_id, "name": name, "arguments": dict(arguments)}]))
        try:
            result = await self.tools.call_tool(name, arguments)
        except Exception as e:  # noqa: BLE001 — the protocol says tools return errors, but a policy must not die of one
            logger.debug("tool %s raised instead of returning an error", name, exc_info=True)
            result = ToolResult(ok=False, text=f"{type(e).__name__}: {e}")
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result.text})
        return result

    async def retrieve(self, query: str, tools: list[RetrievalTool]) -> list[Evidence]:
        """Search once, retrying a failed call on the other tool or with a keyword query."""
        order = route(query, tools)
        result = await self.call(order[0], query)
        if result is not None and not result.ok:
            retry = (order[1], query) if len(order) > 1 else (order[0], keywords(query))
            result = await self.call(*retry)
        return evidence_from(result) if result is not None and result.ok else []

    def finish(self, answer: str) -> AgentResult:
        self.messages.append({"role": "assistant", "content": answer})
        self.events.emit(LLMOutputEvent(turn=self.tool_rounds + 1, content=answer))
        return AgentResult(prediction=answer, turns=self.tool_rounds + 1, messages=self.messages)


class HeuristicAgent:
    """Rule-based agent: decompose, search, read the best span (see the module docstring)."""

    def __init__(self, max_turns: int = 4, top_k: int = 5, pipeline_max_turns: int = 10,
                 answer_tag: str | None = None) -> None:
        refuse_answer_tag(answer_tag, "agent=heuristic",
                          "it writes its answer itself and reads no prompt asking for a tag")
        for name, turns in (("max_turns", max_turns), ("pipeline_max_turns", pipeline_max_turns)):
            if turns < 1:
                raise ValueError(f"{name}={turns} must be at least 1 (the answering turn)")
        if top_k < 1:
            raise ValueError(f"top_k={top_k} must be at least 1")
        self.max_turns = max_turns
        self.top_k = top_k
        self.pipeline_max_turns = pipeline_max_turns

    deterministic = True

    async def run(self, question: str, tools: TaskTools, events: EventLog, *, seed: int | None = None) -> AgentResult:
        plan = plan_question(question)
        steps = find_pipeline_tools(tools.tool_specs)
        if steps is not None:
            episode = _Episode(question, tools, events, self.pipeline_max_turns, self.top_k)
            return episode.finish(await answer_with_pipeline(plan, steps, episode, self.top_k))
        episode = _Episode(question, tools, events, self.max_turns, self.top_k)
        retrieval = find_retrieval_tools(tools.tool_specs)
        if not retrieval and await self._activate_retrieval(episode):
            retrieval = find_retrieval_tools(tools.tool_specs)
        if not retrieval or episode.calls_left == 0:
            return episode.finish(guess_without_evidence(plan))
        return episode.finish(await self._answer(plan, retrieval, episode))

    async def _activate_retrieval(self, episode: _Episode) -> bool:
        """List the tool sets and activate those that search (one call), leaving a turn to search with them."""
        offered = {(s.get("function") or s).get("name") for s in episode.tools.tool_specs if isinstance(s, dict)}
        if not {"list_toolsets", "activate_toolset"} <= offered or episode.calls_left < 3:
            return False
        listing = await episode.call_named("list_toolsets", {})
        names = pick_toolsets(listing.structured if listing is not None and listing.ok else None)
        if not names:
            return False
        activated = await episode.call_named("activate_toolset", {"names": names})
        return activated is not None and activated.ok

    async def _answer(self, plan: QuestionPlan, retrieval: list[RetrievalTool], episode: _Episode) -> str:
        question = plan.question
        if plan.bridge is not None:
            found = await episode.retrieve(plan.bridge.query, retrieval)
            entity = extract_answer(plan.bridge.query, plan.bridge.answer_type, found)
            if entity is not None:
                question = plan.resolved(entity.text)
                logger.debug("resolved %r to %r", plan.bridge.phrase, entity.text)
            elif episode.calls_left == 0:
                return guess_without_evidence(plan)
        found = await episode.retrieve(question, retrieval)
        answer = extract_answer(question, plan.answer_type, found)
        if answer is None and episode.calls_left > 0:
            # Nothing of the wanted kind came back: ask again in keywords, on the other kind of tool
            # when there is one.
            others = [t for t in retrieval if t != route(question, retrieval)[0]] or retrieval
            found = await episode.retrieve(keywords(question), others)
            answer = extract_answer(question, plan.answer_type, found)
        return answer.text if answer is not None else ""
