"""The heuristic agent on the RAG pipeline's step tools: the order of its calls, its fallbacks, its turn budget."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pytest

from rollout.agents.heuristic import HeuristicAgent
from rollout.agents.heuristic_pipeline import find_pipeline_tools
from rollout.events import EventLog
from rollout.question_reading import Evidence, extract_answer, plan_question
from rollout.records import ToolResult

RETRIEVE, FILTER, CHUNK, GENERATE = "retrieve_documents", "filter_documents", "chunk_documents", "generate_answer"
STEPS = (RETRIEVE, FILTER, CHUNK, GENERATE)
DOCS = {
    "doc-1": ("Veltrix Holdings", "Veltrix Holdings was founded in 1978 by Arlen Voss."),
    "doc-2": ("Arlen Voss", "Arlen Voss was born in Kelmor. He works as a pilot."),
    "doc-3": ("Naimi Holdings", "Naimi Holdings was founded in 1990 by Stimo Thuveir."),
    "doc-4": ("Stimo Thuveir", "Stimo Thuveir was born in Rodum."),
    "doc-5": ("Kelmor", "Kelmor is a city in Pajo."),
}
BRIDGE_QUESTION = "In which city was the founder of Veltrix Holdings born?"
_PARAMETERS = {
    RETRIEVE: {"query": {"type": "string"}, "max_docs": {"type": "integer"}},
    FILTER: {"query": {"type": "string"}, "doc_ids": {"type": "array"}, "relevance_threshold": {"type": "integer"}},
    CHUNK: {"doc_ids": {"type": "array"}, "token_limit": {"type": "integer"}, "query": {"type": "string"}},
    GENERATE: {"query": {"type": "string"}, "doc_ids": {"type": "array"}, "model": {"type": "string"}},
}


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _spec(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    # The real retrieve tool says it returns documents "without their text", so the passage-search
    # policy never takes it for a search tool.
    return {"type": "function", "function": {
        "name": name, "description": f"[{name}] a pipeline step; returns documents without their text.",
        "parameters": {"type": "object", "properties": parameters if parameters is not None else _PARAMETERS[name]}}}


class FakeSteps:
    """TaskTools offering the pipeline's step tools over `DOCS`; records every call.

    retrieve ranks by shared words; filter keeps the documents sharing at least two words with the query
    (or none, with `keep_none`); chunk returns the documents' text in the order given; generate reads with
    the extractive reader, or answers `answer` when one is set.
    """

    def __init__(self, names: Iterable[str] = STEPS, *, keep_none: bool = False, answer: str | None = None,
                 failing: Iterable[str] = ()) -> None:
        self.names = list(names)
        self.keep_none = keep_none
        self.answer = answer
        self.failing = set(failing)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.returned: list[ToolResult] = []

    @property
    def system_prompt(self) -> str:
        return "Answer with the pipeline's steps."

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        return [_spec(n) for n in self.names]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append((name, dict(arguments)))
        self.returned.append(self._answer(name, arguments))
        return self.returned[-1]

    def _answer(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name in self.failing:
            return ToolResult(False, f"{name} is unavailable")
        if name == RETRIEVE:
            query = _words(arguments["query"])
            ranked = sorted(DOCS, key=lambda d: (-len(query & _words(" ".join(DOCS[d]))), d))
            results = [{"id": d, "doc_id": d, "title": DOCS[d][0], "score": 1.0, "rank": i, "tokens": 10}
                       for i, d in enumerate(ranked[: arguments.get("max_docs", 5)], start=1)]
            return ToolResult(True, "ranked", {"query": arguments["query"], "results": results})
        if name == FILTER:
            query = _words(arguments["query"])
            kept = [] if self.keep_none else [d for d in arguments["doc_ids"]
                                              if len(query & _words(" ".join(DOCS[d]))) >= 2]
            return ToolResult(True, "scored", {"relevant_doc_ids": kept, "results": []})
        if name == CHUNK:
            results = [{"doc_id": d, "title": DOCS[d][0], "text": DOCS[d][1], "rank": i}
                       for i, d in enumerate(arguments["doc_ids"], start=1)]
            return ToolResult(True, "chunks", {"results": results})
        if name == GENERATE:
            if self.answer is not None:
                return ToolResult(True, "answered", {"answer": self.answer})
            evidence = [Evidence(DOCS[d][0], DOCS[d][1], i) for i, d in enumerate(arguments["doc_ids"])]
            found = extract_answer(arguments["query"], plan_question(arguments["query"]).answer_type, evidence)
            return ToolResult(True, "answered", {"answer": "" if found is None else found.text})
        return ToolResult(False, f"unknown tool {name!r}")

    def names_called(self) -> list[str]:
        return [name for name, _ in self.calls]

    def ids_returned(self, call: int, key: str) -> list[str]:
        """The document ids call number `call` returned: `results`' doc_id, or the list under `key`."""
        structured = self.returned[call].structured
        return [r["doc_id"] for r in structured["results"]] if key == "results" else structured[key]


async def ask(question: str, tools: FakeSteps, **agent: int) -> Any:
    return await HeuristicAgent(**agent).run(question, tools, EventLog("t"))


def test_the_step_tools_are_found_only_when_retrieve_and_chunk_are_offered():
    specs = [_spec(n) for n in STEPS]
    found = find_pipeline_tools(specs)
    assert found is not None and (found.filter, found.generate, found.takes_max_docs) == (FILTER, GENERATE, True)
    bare = find_pipeline_tools([_spec(RETRIEVE), _spec(CHUNK)])
    assert bare is not None and (bare.filter, bare.generate) == (None, None)
    assert find_pipeline_tools([_spec(RETRIEVE), _spec(FILTER), _spec(GENERATE)]) is None
    # A tool that only shares the name, without the parameters the agent passes, is not a step.
    assert find_pipeline_tools([_spec(RETRIEVE, {"text": {"type": "string"}}), _spec(CHUNK)]) is None


async def test_a_one_hop_question_goes_retrieve_filter_chunk_generate():
    tools = FakeSteps()
    result = await ask("Where was Stimo Thuveir born?", tools)
    assert tools.names_called() == list(STEPS)
    (_, retrieve), (_, filtering), (_, chunk), (_, generate) = tools.calls
    assert retrieve == {"query": "Where was Stimo Thuveir born?", "max_docs": 5}
    assert filtering == {"query": "Where was Stimo Thuveir born?", "doc_ids": tools.ids_returned(0, "results")}
    kept = tools.ids_returned(1, "relevant_doc_ids")
    assert 0 < len(kept) < len(filtering["doc_ids"])  # the filter drops some, so passing them on is visible
    assert chunk == {"doc_ids": kept, "query": "Where was Stimo Thuveir born?"}
    assert generate["doc_ids"] == chunk["doc_ids"]
    assert result.prediction == "Rodum" and result.turns == 5


async def test_a_two_hop_question_resolves_the_bridge_from_chunks_then_generates():
    tools = FakeSteps()
    result = await ask(BRIDGE_QUESTION, tools)
    assert tools.names_called() == [RETRIEVE, FILTER, CHUNK, *STEPS]
    bridge_query = plan_question(BRIDGE_QUESTION).bridge.query
    assert [args["query"] for _, args in tools.calls[:3]] == [bridge_query] * 3
    assert {args["query"] for _, args in tools.calls[3:]} == {"In which city was Arlen Voss born?"}
    assert result.prediction == "Kelmor" and result.turns == 8


async def test_when_the_filter_keeps_nothing_the_retrieved_documents_are_read():
    tools = FakeSteps(keep_none=True)
    result = await ask("Where was Stimo Thuveir born?", tools)
    retrieved = tools.ids_returned(0, "results")
    assert tools.names_called() == list(STEPS) and tools.ids_returned(1, "relevant_doc_ids") == []
    assert tools.calls[2][1]["doc_ids"] == retrieved and tools.calls[3][1]["doc_ids"] == retrieved
    assert result.prediction == "Rodum"


async def test_a_failing_filter_passes_the_retrieved_documents_on():
    tools = FakeSteps(failing=[FILTER])
    await ask("Where was Stimo Thuveir born?", tools)
    assert tools.names_called() == list(STEPS)
    assert tools.calls[2][1]["doc_ids"] == tools.ids_returned(0, "results")


async def test_generate_answer_is_preferred_and_an_empty_one_is_replaced_by_reading_the_chunks():
    assert (await ask("Where was Stimo Thuveir born?", FakeSteps(answer="Hestork"))).prediction == "Hestork"
    tools = FakeSteps(answer="")
    result = await ask("Where was Stimo Thuveir born?", tools)
    assert tools.names_called() == list(STEPS) and result.prediction == "Rodum"


@pytest.mark.parametrize("failing", [[GENERATE], []])
async def test_without_a_working_generate_step_the_agent_reads_the_chunks(failing):
    names = STEPS if failing else (RETRIEVE, CHUNK)
    tools = FakeSteps(names, failing=failing)
    result = await ask("Where was Stimo Thuveir born?", tools)
    assert tools.names_called() == list(names)
    assert result.prediction == "Rodum"


async def test_a_failed_retrieval_is_retried_once_with_keywords():
    tools = FakeSteps(failing=[RETRIEVE])
    result = await ask("Where was Stimo Thuveir born?", tools)
    assert tools.names_called() == [RETRIEVE, RETRIEVE]
    assert tools.calls[1][1]["query"] == "Stimo Thuveir born"
    assert result.turns == 3 and result.prediction == ""  # nothing was read, and nothing is made up


async def test_the_pipeline_budget_is_pipeline_max_turns_not_max_turns():
    tools = FakeSteps()
    assert (await ask(BRIDGE_QUESTION, tools, max_turns=2)).turns == 8 and len(tools.calls) == 7
    for budget in (1, 2, 4, 6):
        tools = FakeSteps()
        result = await ask(BRIDGE_QUESTION, tools, pipeline_max_turns=budget)
        assert result.turns <= budget and len(tools.calls) == min(budget - 1, 7)
        assert tools.names_called() == [RETRIEVE, FILTER, CHUNK, *STEPS][: budget - 1]
    with pytest.raises(ValueError, match="pipeline_max_turns"):
        HeuristicAgent(pipeline_max_turns=0)
