"""An offline, deterministic policy that answers with whatever retrieval tools it is offered.

It stands in for a language model when none is reachable, so that every mode of the harness
can run and be scored. It reads only the question and the tool surface — never gold answers.

Tools. A tool is a retrieval tool when its schema takes a string ``query``. Its name and
description say which kind it is: "dense", "semantic", "vector" or "embedding" mean dense;
"sparse", "bm25", "keyword" or "lexical" mean sparse. Tools without a ``query`` parameter
(e.g. corpus information) are never called. With no retrieval tool the agent answers from
the question alone in one turn — the no-tool baseline.

Routing (when both kinds are offered). A query that contains an identifier-like token — one
mixing letters and digits, such as ``ORG-5521`` or ``P-48213`` — or a quoted string goes to
the sparse tool, because exact tokens are what keyword matching is good at and what an
encoder blurs; every other query goes to the dense tool. With one kind offered, everything
goes there.

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

from envs.records import ToolResult
from rollout.agents.base import AgentResult, TaskTools
from rollout.agents.heuristic_reading import (
    IDENTIFIER,
    Evidence,
    QuestionPlan,
    extract_answer,
    guess_without_evidence,
    keywords,
    plan_question,
)

logger = logging.getLogger(__name__)

_DENSE_WORDS = ("dense", "semantic", "vector", "embedding")
_SPARSE_WORDS = ("sparse", "bm25", "keyword", "lexical")


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
    for spec in tool_specs:
        function = spec.get("function", spec) if isinstance(spec, dict) else {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        query = properties.get("query") if isinstance(properties, dict) else None
        if not isinstance(query, dict) or query.get("type", "string") != "string" or not function.get("name"):
            continue
        words = f"{function.get('name', '')} {function.get('description', '')}".lower()
        kind = ("sparse" if any(w in words for w in _SPARSE_WORDS)
                else "dense" if any(w in words for w in _DENSE_WORDS) else "other")
        found.append(RetrievalTool(str(function["name"]), kind, "top_k" in properties))
    return found


def route(query: str, tools: list[RetrievalTool]) -> list[RetrievalTool]:
    """Tools to try for a query, best first (see the module docstring for the rule)."""
    first = "sparse" if IDENTIFIER.search(query) else "dense"
    order = {first: 0, "other": 1}
    return sorted(tools, key=lambda t: order.get(t.kind, 2))


def evidence_from(result: ToolResult) -> list[Evidence]:
    """Passages from a search result: its structured hits, else its text split into blocks."""
    hits = (result.structured or {}).get("results")
    if isinstance(hits, list):
        evidence = []
        for i, hit in enumerate(hits):
            if isinstance(hit, dict) and isinstance(hit.get("text"), str):
                rank = hit.get("rank", i)
                evidence.append(Evidence(str(hit.get("title", "")), hit["text"],
                                         rank if isinstance(rank, int) else i))
        return evidence
    blocks = [b.strip() for b in result.text.split("\n\n") if b.strip()]
    return [Evidence("", block, i) for i, block in enumerate(blocks)]


class _Episode:
    """One question: the conversation so far and the turn budget."""

    def __init__(self, question: str, tools: TaskTools, max_turns: int, top_k: int) -> None:
        self.tools = tools
        self.top_k = top_k
        self.calls_left = max_turns - 1  # the last turn is the answer
        self.tool_rounds = 0
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": tools.system_prompt},
            {"role": "user", "content": question},
        ]

    async def call(self, tool: RetrievalTool, query: str) -> ToolResult | None:
        """Call one tool as one turn; None when the turn budget is spent."""
        if self.calls_left <= 0:
            return None
        self.calls_left -= 1
        arguments: dict[str, Any] = {"query": query}
        if tool.takes_top_k:
            arguments["top_k"] = self.top_k
        call_id = f"call_{self.tool_rounds}"
        self.tool_rounds += 1
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": tool.name, "arguments": json.dumps(arguments)}}]})
        try:
            result = await self.tools.call_tool(tool.name, arguments)
        except Exception as e:  # noqa: BLE001 — the protocol says tools return errors, but a policy must not die of one
            logger.debug("tool %s raised instead of returning an error", tool.name, exc_info=True)
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
        return AgentResult(prediction=answer, turns=self.tool_rounds + 1, messages=self.messages)


class HeuristicAgent:
    """Rule-based agent: decompose, search, read the best span (see the module docstring)."""

    def __init__(self, max_turns: int = 4, top_k: int = 5) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns={max_turns} must be at least 1 (the answering turn)")
        if top_k < 1:
            raise ValueError(f"top_k={top_k} must be at least 1")
        self.max_turns = max_turns
        self.top_k = top_k

    async def run(self, question: str, tools: TaskTools) -> AgentResult:
        episode = _Episode(question, tools, self.max_turns, self.top_k)
        plan = plan_question(question)
        retrieval = find_retrieval_tools(tools.tool_specs)
        if not retrieval or episode.calls_left == 0:
            return episode.finish(guess_without_evidence(plan))
        return episode.finish(await self._answer(plan, retrieval, episode))

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
