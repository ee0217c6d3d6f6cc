"""The pipeline step tools (retrieve, filter, chunk, generate, search sources, visualise) over a real MCP client,
on a corpus built here: offline (encoder scorer, extractive reader) and against a scripted chat-completions server."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import numpy as np
import pytest
from mcp.client.client import Client

from rollout.data.loaders import load_corpus_spec
from rollout.data.specs import CorpusSpec
from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway
from rollout.gateway.steps import ANSWER_SYSTEM, COSINE_TEN, COSINE_ZERO, StepSettings, cosine_to_score, parse_score
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.llm.chat_client import LLMSettings
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, load_or_build_indexes
from rollout.wire import INFRA_OUTCOMES, META_ACCOUNTING, META_TASK_ID, classify_result
from tests.agents.chat_server import MODEL, answer, chat_server, error, usage
from tests.gateway.loopback import gateway_file

FILLER = " ".join(f"filler{i}" for i in range(430))
PASSAGES = [
    # Document "voss" is chunked into three passages; its second passage is long (chunked again by recall), and
    # its last has a title of its own.
    Passage("voss-0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961.", doc_id="voss"),
    Passage("voss-1", "Arlen Voss", f"{FILLER} Voss founded the Kelmor glassworks.", doc_id="voss"),
    Passage("voss-2", "Family", "Voss married a painter from Dravia.", doc_id="voss"),
    Passage("veltrix", "Veltrix Holdings", "Veltrix Holdings makes textile looms. It was founded in 1988 by Arlen Voss."),
    Passage("kelmor", "Kelmor", "Kelmor is a port city in Dravia with a glassworks."),
    Passage("dravia", "Dravia", "Dravia is a country on the northern sea."),
    Passage("orchards", "Orchards", "Apple orchards line the valley roads."),
]
STEPS = ["rag_retrieve_sparse", "rag_filter", "rag_chunk", "rag_generate", "rag_sources", "rag_visualize"]
FOUNDER = "Who founded Veltrix Holdings?"


@pytest.fixture(scope="module")
def indexes(cache_dir):
    retrievers = load_or_build_indexes(PASSAGES, cache_dir, which=["hybrid"])
    yield retrievers
    retrievers["dense"].close()


@pytest.fixture(scope="module")
def kb(indexes) -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, indexes)


async def _call(kb, name, arguments, *, groups=STEPS, meta=None):
    async with Client(build_gateway(gateway_file({"resource_type": "rag", "tool_groups": list(groups)}), kb)) as c:
        return await c.call_tool(name, arguments, meta=meta)


def _error(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def _doc_text_tokens(kb, doc: str) -> int:
    counter = kb.token_counter()
    return sum(counter.count(p.text) for p in PASSAGES if p.source_id == doc)


# --- plan ---


def test_the_shipped_pipeline_file_serves_the_four_steps_on_the_hybrid_index():
    plan = plan_gateway(load_gateway_file(GATEWAYS_DIR / "rag_pipeline.json"))
    assert [t.fn.__name__ for t in plan.tools] == [
        "retrieve_documents", "filter_documents", "chunk_documents", "generate_answer"]
    assert [t.stage for t in plan.tools] == ["retrieval", "filtering", "chunking", "generation"]
    assert set(plan.requires) == {"hybrid", "dense"}


def test_two_groups_serving_one_tool_name_is_a_config_error_naming_both():
    file = gateway_file({"resource_type": "rag", "tool_groups": ["rag_retrieve_dense", "rag_retrieve_sparse"]})
    with pytest.raises(ConfigError, match="'rag_retrieve_dense' and 'rag_retrieve_sparse'.*'retrieve_documents'"):
        plan_gateway(file)


# --- retrieve_documents ---


@pytest.mark.parametrize("kind", ["sparse", "dense", "hybrid"])
async def test_retrieve_ranks_whole_documents_by_their_best_passage(kb, kind):
    result = await _call(kb, "retrieve_documents", {"query": FOUNDER, "max_docs": 5},
                         groups=[f"rag_retrieve_{kind}"])
    assert not result.is_error
    content = result.structured_content
    assert content["query"] == FOUNDER and content["retriever"] == kind
    hits = content["results"]
    assert hits and hits[0]["doc_id"] == "veltrix"
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    assert len({h["doc_id"] for h in hits}) == len(hits) and all(h["id"] == h["doc_id"] for h in hits)
    assert all("text" not in h for h in hits)
    # Each document's score and title are those of its best passage, as the index ranks the passages.
    passages = kb.retrievers[kind].search([FOUNDER], len(PASSAGES))
    best: dict[str, tuple[float, str]] = {}
    for row, score in zip(passages.indices[0].tolist(), passages.scores[0].tolist(), strict=True):
        p = PASSAGES[row]
        if row >= 0 and p.source_id not in best:
            best[p.source_id] = (score, p.title)
    for h in hits:
        assert h["score"] == pytest.approx(best[h["doc_id"]][0]) and h["title"] == best[h["doc_id"]][1]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    # The size is the whole document's text (all its passages), in the gateway tokenizer's tokens.
    for h in hits:
        assert h["tokens"] == _doc_text_tokens(kb, h["doc_id"])
    text = result.content[0].text
    assert text.startswith(f'Relevance to "{FOUNDER}" (retrieve_documents, {kind})')
    assert f"veltrix · Veltrix Holdings · {hits[0]['tokens']} tokens" in text.splitlines()[1]


@pytest.mark.parametrize(("query", "title"), [("Arlen Voss born Kelmor 1961", "Arlen Voss"),
                                              ("Voss married a painter", "Family")])
async def test_retrieve_names_and_sizes_a_chunked_document(kb, query, title):
    result = await _call(kb, "retrieve_documents", {"query": query, "max_docs": 1})
    [hit] = result.structured_content["results"]
    counter = kb.token_counter()
    assert hit["doc_id"] == "voss" and hit["title"] == title  # the title of the passage that matched
    assert hit["tokens"] == sum(counter.count(p.text) for p in PASSAGES[:3]) > counter.count(PASSAGES[1].text)


async def test_retrieve_rejects_a_bad_count_and_an_empty_query(kb):
    for bad in (0, 51):
        result = await _call(kb, "retrieve_documents", {"query": FOUNDER, "max_docs": bad})
        assert "max_docs must be between 1 and 50" in _error(result)
    assert "query is empty" in _error(await _call(kb, "retrieve_documents", {"query": "   "}))


# --- search_documents and recall_documents on every index ---


@pytest.mark.parametrize(("group", "kind"), [("rag_search", "sparse"), ("rag_search_dense", "dense"),
                                             ("rag_search_hybrid", "hybrid")])
async def test_document_search_ranks_on_the_index_its_group_names(kb, group, kind):
    result = await _call(kb, "search_documents", {"query": FOUNDER, "max_files": 5}, groups=[group])
    content = result.structured_content
    assert content["retriever"] == kind
    retrieved = await _call(kb, "retrieve_documents", {"query": FOUNDER, "max_docs": 5},
                            groups=[f"rag_retrieve_{kind}"])
    # The same documents and scores as the pipeline's retrieve on that index: both rank by best passage.
    assert [(h["doc_id"], h["score"]) for h in content["results"]] == [
        (h["doc_id"], h["score"]) for h in retrieved.structured_content["results"]]


@pytest.mark.parametrize(("group", "kind"), [("rag_recall", "sparse"), ("rag_recall_dense", "dense"),
                                             ("rag_recall_hybrid", "hybrid")])
async def test_recall_without_ids_reads_the_documents_its_index_finds(kb, group, kind):
    query = "painter from Dravia"
    result = await _call(kb, "recall_documents", {"query": query, "max_tokens": 500}, groups=[group])
    found = await _call(kb, "search_documents", {"query": query},
                        groups=[{"sparse": "rag_search"}.get(kind, f"rag_search_{kind}")])
    assert result.structured_content["doc_ids"] == [h["doc_id"] for h in found.structured_content["results"]]


async def test_dense_document_search_finds_documents_sharing_no_word_with_the_query(kb):
    query = "weaving machine company"  # veltrix makes "textile looms": no word in common
    dense = await _call(kb, "search_documents", {"query": query}, groups=["rag_search_dense"])
    sparse = await _call(kb, "search_documents", {"query": query}, groups=["rag_search"])
    assert dense.structured_content["results"][0]["doc_id"] == "veltrix"
    assert sparse.structured_content["results"] == []  # BM25 needs a shared word


# --- filter_documents, offline ---


def test_cosine_maps_linearly_to_a_zero_to_ten_score():
    assert [cosine_to_score(c) for c in (-0.3, COSINE_ZERO, 0.45, COSINE_TEN, 0.95)] == [0, 0, 5, 10, 10]
    assert cosine_to_score(0.3) == 2 and cosine_to_score(0.62) == 8


def test_an_llm_score_is_the_first_number_of_the_reply_clamped():
    assert [parse_score(r) for r in ("7", "Score: 3/10", "12", "8.6", "-3", "none")] == [7, 3, 10, 9, 0, None]


async def test_offline_filter_scores_each_document_by_its_best_passage_cosine(kb):
    docs = ["orchards", "voss", "veltrix", "kelmor"]
    result = await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": docs, "relevance_threshold": 0})
    assert not result.is_error
    content = result.structured_content
    assert content["scorer"] == "encoder" and content["threshold"] == 0
    expected = _encoder_scores(kb, FOUNDER, docs)
    got = {r["doc_id"]: r["relevance"] for r in content["results"]}
    assert got == expected
    # The document that answers scores above the unrelated one.
    assert got["veltrix"] > got["orchards"]
    # Most relevant first; ties keep the order given.
    assert [r["doc_id"] for r in content["results"]] == sorted(docs, key=lambda d: (-expected[d], docs.index(d)))
    assert all(r["is_relevant"] for r in content["results"])
    assert content["relevant_doc_ids"] == [r["doc_id"] for r in content["results"]]


def _encoder_scores(kb, query: str, docs: list[str]) -> dict[str, int]:
    encoder = kb.retrievers["dense"].encoder
    vector = encoder.encode_queries([query])[0]
    scores = {}
    for doc in docs:
        vectors = encoder.encode_passages([p.contents for p in PASSAGES if p.source_id == doc])
        scores[doc] = cosine_to_score(float(np.max(vectors @ vector)))
    return scores


async def test_offline_filter_scores_a_chunked_document_by_the_passage_that_answers(kb):
    question = "Where was Arlen Voss born?"
    result = await _call(kb, "filter_documents", {"query": question, "doc_ids": ["voss"]})
    [scored] = result.structured_content["results"]
    assert scored["relevance"] == _encoder_scores(kb, question, ["voss"])["voss"]
    # Its first passage answers; the others, scored alone, would rank the document lower.
    assert scored["relevance"] > _encoder_scores(kb, question, ["orchards"])["orchards"]
    encoder = kb.retrievers["dense"].encoder
    others = encoder.encode_passages([p.contents for p in PASSAGES[1:3]]) @ encoder.encode_queries([question])[0]
    assert scored["relevance"] > cosine_to_score(float(np.max(others)))


async def test_filter_marks_relevant_documents_at_the_threshold(kb):
    docs = ["orchards", "veltrix"]
    scores = await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": docs, "relevance_threshold": 0})
    top = scores.structured_content["results"][0]["relevance"]
    result = await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": docs, "relevance_threshold": top})
    content = result.structured_content
    assert [(r["doc_id"], r["is_relevant"]) for r in content["results"]] == [("veltrix", True), ("orchards", False)]
    assert content["relevant_doc_ids"] == ["veltrix"]
    lines = result.content[0].text.splitlines()
    assert lines[0] == f'Relevance to "{FOUNDER}" (filter_documents, encoder, 0-10, relevant at {top} or more)'
    assert "✓ veltrix" in lines[1] and "✗ orchards" in lines[2]


async def test_filter_rejects_bad_arguments(kb):
    def call(**arguments):
        return _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": ["veltrix"], **arguments})

    assert "unknown document ids: nope, gone" in _error(await call(doc_ids=["veltrix", "nope", "gone"]))
    long = _error(await call(doc_ids=["veltrix", "x" * 900_000]))  # not echoed back whole to the model
    assert "a doc_id is 900000 characters; the limit is 2000" in long and len(long) < 1000
    assert "doc_ids is empty" in _error(await call(doc_ids=[]))
    for bad in (11, -1):
        assert f"relevance_threshold must be between 0 and 10, got {bad}" in _error(await call(relevance_threshold=bad))
    assert "query is empty" in _error(await call(query=""))


# --- chunk_documents ---


async def test_chunk_ranks_chunks_against_the_query_within_the_budget(kb):
    result = await _call(kb, "chunk_documents",
                         {"doc_ids": ["voss", "kelmor"], "token_limit": 300, "query": "glassworks founded"})
    assert not result.is_error
    content = result.structured_content
    chunks = content["results"]
    counter = kb.token_counter()
    assert content["max_tokens"] == 300 and content["query"] == "glassworks founded"
    assert content["total_tokens"] == sum(c["tokens"] for c in chunks) <= 300
    assert all(c["tokens"] == counter.count(c["text"]) for c in chunks)
    assert (chunks[0]["id"], chunks[0]["chunk"]) == ("voss-1", 2) and "glassworks" in chunks[0]["text"]
    assert [c["score"] for c in chunks] == sorted((c["score"] for c in chunks), reverse=True)
    assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert chunks[-1]["truncated"] and not any(c["truncated"] for c in chunks[:-1])


async def test_chunk_without_a_query_keeps_the_documents_order(kb):
    for query in ({}, {"query": "  "}):
        result = await _call(kb, "chunk_documents", {"doc_ids": ["kelmor", "voss"], "token_limit": 32000, **query})
        content = result.structured_content
        assert content["query"] is None
        assert [(c["id"], c["chunk"]) for c in content["results"]] == [
            ("kelmor", 0), ("voss-0", 0), ("voss-1", 0), ("voss-1", 1), ("voss-1", 2), ("voss-2", 0)]
        assert not any(c["truncated"] for c in content["results"])
        assert content["total_tokens"] == _doc_text_tokens(kb, "kelmor") + sum(
            c["tokens"] for c in content["results"] if c["doc_id"] == "voss")


async def test_chunk_rejects_a_budget_out_of_range_and_unknown_documents(kb):
    for bad in (0, kb.max_recall_tokens + 1):
        result = await _call(kb, "chunk_documents", {"doc_ids": ["voss"], "token_limit": bad})
        assert f"token_limit must be between 1 and {kb.max_recall_tokens}, got {bad}" in _error(result)
    assert "unknown document ids: nope" in _error(await _call(kb, "chunk_documents", {"doc_ids": ["nope"]}))
    assert "doc_ids is empty" in _error(await _call(kb, "chunk_documents", {"doc_ids": []}))


# --- generate_answer, offline ---


@pytest.mark.parametrize(("question", "docs", "expected"), [
    ("Where was Arlen Voss born?", ["dravia", "voss"], "Kelmor"),
    (FOUNDER, ["orchards", "veltrix"], "Arlen Voss"),
])
async def test_offline_generate_extracts_the_answer_from_the_documents(kb, question, docs, expected):
    result = await _call(kb, "generate_answer", {"query": question, "doc_ids": docs})
    assert not result.is_error
    content = result.structured_content
    assert content["answer"] == expected and content["reader"] == "extractive" and content["doc_ids"] == docs
    assert any(expected in p.text for p in PASSAGES if p.source_id in docs)
    read = kb.read_documents(question, docs, 2000, "")
    assert content["context_tokens"] == read.total_tokens > 0


async def test_generate_rejects_bad_arguments(kb):
    assert "unknown document ids: nope" in _error(
        await _call(kb, "generate_answer", {"query": FOUNDER, "doc_ids": ["veltrix", "nope"]}))
    assert "doc_ids is empty" in _error(await _call(kb, "generate_answer", {"query": FOUNDER, "doc_ids": []}))
    assert "query is empty" in _error(await _call(kb, "generate_answer", {"query": " ", "doc_ids": ["veltrix"]}))


async def test_without_an_endpoint_and_offline_steps_off_filter_and_generate_say_what_to_set(kb):
    strict = KnowledgeBase(PASSAGES, kb.retrievers, steps=StepSettings(offline=False))
    for tool in ("filter_documents", "generate_answer"):
        message = _error(await _call(strict, tool, {"query": FOUNDER, "doc_ids": ["veltrix"]}))
        assert f"{tool} has no LLM endpoint" in message
        assert "llm.model and llm.base_url" in message and "offline_steps" in message


# --- search_sources ---

FILES = {
    "README.md": "Project overview. The widget is a small tool.",
    "guides/setup.md": "Setup guide: install the widget, then configure the port.",
    "guides/advanced/tuning.md": "Tuning the widget: raise the port buffer for heavy widget traffic. " + " ".join(
        f"note{i}" for i in range(30)),
    "notes/todo.txt": "Todo: write the widget changelog.",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def folder_kb(folder) -> KnowledgeBase:
    passages = load_corpus_spec(CorpusSpec(path=str(folder), chunk_tokens=12, chunk_overlap=0))
    assert len(passages) > len(FILES)  # the long file is cut into several passages named by its path
    return KnowledgeBase(passages, {"sparse": BM25Retriever.build(passages)}, steps=StepSettings(sources_root=folder))


async def _sources(kb, **arguments):
    result = await _call(kb, "search_sources", {"query": "widget port", **arguments})
    return result if result.is_error else [h["doc_id"] for h in result.structured_content["results"]]


async def test_search_sources_searches_a_folder_of_the_corpus(folder_kb, folder):
    assert sorted(await _sources(folder_kb)) == sorted(FILES)
    assert await _sources(folder_kb, recursive=False) == ["README.md"]
    assert len(await _sources(folder_kb, max_docs=2)) == 2
    assert sorted(await _sources(folder_kb, path="guides")) == ["guides/advanced/tuning.md", "guides/setup.md"]
    assert await _sources(folder_kb, path="guides/", recursive=False) == ["guides/setup.md"]
    assert await _sources(folder_kb, path="guides/advanced/tuning.md") == ["guides/advanced/tuning.md"]
    assert sorted(await _sources(folder_kb, path=str(folder / "guides"))) == [
        "guides/advanced/tuning.md", "guides/setup.md"]


async def test_search_sources_on_a_corpus_not_made_from_a_folder_searches_every_document():
    # Ids are not paths there: one holding "/" is not inside a folder that recursive=false would skip.
    passages = [Passage("AC/DC", "AC/DC", "A widget band from the port city."), Passage("misc", "Misc", "Orchards.")]
    kb = KnowledgeBase(passages, {"sparse": BM25Retriever.build(passages)})
    assert await _sources(kb, recursive=False) == ["AC/DC"]


async def test_search_sources_returns_paths_sizes_and_the_scope(folder_kb):
    result = await _call(folder_kb, "search_sources", {"query": "widget port buffer", "path": "guides"})
    content = result.structured_content
    assert content["retriever"] == "sources" and content["path"] == "guides"
    assert content["results"][0]["doc_id"] == "guides/advanced/tuning.md"
    for hit in content["results"]:
        passages = [p for p in folder_kb.passages if p.source_id == hit["doc_id"]]
        assert hit["title"] == hit["doc_id"]
        assert hit["tokens"] == sum(folder_kb.token_counter().count(p.text) for p in passages)
    assert result.content[0].text.startswith('Relevance to "widget port buffer" (search_sources, sources)')


async def test_search_sources_refuses_paths_outside_the_root_or_not_in_the_corpus(folder_kb, kb, folder):
    for outside in ("../x", "guides/../../x", str(folder.parent)):
        assert "is outside the corpus root" in _error(await _sources(folder_kb, path=outside))
    assert "no documents under 'nope'" in _error(await _sources(folder_kb, path="nope"))
    assert "query is empty" in _error(await _call(folder_kb, "search_sources", {"query": ""}))
    # A corpus not made from a folder has no paths to scope by; without one it searches the whole corpus.
    assert "not made from a folder" in _error(await _call(kb, "search_sources", {"query": "Kelmor", "path": "x"}))
    whole = await _call(kb, "search_sources", {"query": "Kelmor glassworks"})
    assert [h["doc_id"] for h in whole.structured_content["results"]][:2] == ["kelmor", "voss"]


# --- visualize_doc_relevance ---


def _rows(text: str) -> list[str]:
    return text.splitlines()[1:]


async def test_visualize_shows_the_last_result_of_the_same_task_only(kb):
    mine, other = {META_TASK_ID: "viz-1"}, {META_TASK_ID: "viz-2"}
    retrieved = await _call(kb, "retrieve_documents", {"query": FOUNDER, "max_docs": 3}, meta=mine)
    shown = await _call(kb, "visualize_doc_relevance", {}, meta=mine)
    assert not shown.is_error
    view = shown.content[0].text
    assert view == retrieved.content[0].text  # heading (tool and index) and rows, as first shown
    filtered = await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": ["orchards", "veltrix"]}, meta=mine)
    later = (await _call(kb, "visualize_doc_relevance", {}, meta=mine)).content[0].text
    assert _rows(later) == _rows(filtered.content[0].text)
    for stranger in (other, None):
        message = _error(await _call(kb, "visualize_doc_relevance", {}, meta=stranger))
        assert "no earlier retrieve, filter or source search in this task" in message


async def test_visualize_scores_given_documents_against_a_query(kb):
    docs = ["orchards", "veltrix"]
    filtered = await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": docs})
    scores = {r["doc_id"]: r["relevance"] for r in filtered.structured_content["results"]}
    view = (await _call(kb, "visualize_doc_relevance", {"doc_ids": docs, "query": FOUNDER})).content[0].text
    lines = view.splitlines()
    assert lines[0] == f'Relevance to "{FOUNDER}" (encoder, 0-10)'
    for line, doc in zip(lines[1:], docs, strict=True):  # in the order given
        assert re.search(rf"\]\s+{scores[doc]} {doc}\b", line), line


async def test_visualize_given_documents_takes_their_scores_from_the_tasks_last_result(kb):
    meta = {META_TASK_ID: "viz-3"}
    await _call(kb, "filter_documents", {"query": FOUNDER, "doc_ids": ["veltrix"]}, meta=meta)
    view = (await _call(kb, "visualize_doc_relevance", {"doc_ids": ["dravia", "veltrix"]}, meta=meta)).content[0].text
    lines = view.splitlines()
    assert lines[0].startswith(f'Relevance to "{FOUNDER}" (filter_documents')
    assert re.search(r"\[ {10}\]\s+- dravia", lines[1]) and "veltrix" in lines[2] and " - " not in lines[2]
    assert "unknown document ids: nope" in _error(
        await _call(kb, "visualize_doc_relevance", {"doc_ids": ["nope"]}, meta=meta))


async def test_visualize_against_a_query_without_a_dense_index_says_to_leave_the_query_out():
    sparse_only = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    result = await _call(sparse_only, "visualize_doc_relevance", {"doc_ids": ["veltrix"], "query": FOUNDER},
                         groups=["rag_visualize"])
    message = _error(result)
    assert "needs the dense index's encoder" in message and "leave query out" in message
    shown = await _call(sparse_only, "visualize_doc_relevance", {"doc_ids": ["veltrix"]}, groups=["rag_visualize"])
    assert not shown.is_error and "veltrix" in shown.content[0].text


# --- the LLM endpoint ---


@pytest.fixture(scope="module")
def llm_server():
    with chat_server() as server:
        yield server


@pytest.fixture
def llm(llm_server):
    llm_server.reset()
    return llm_server


def _llm_kb(kb, base_url: str) -> KnowledgeBase:
    settings = LLMSettings(base_url=base_url, model=MODEL, api_key_env=None, max_retries=0, timeout_s=10)
    return KnowledgeBase(PASSAGES, kb.retrievers, steps=StepSettings(llm=settings))


def _prompt_doc(body) -> str:
    return re.search(r"Document \(([^)]+)\)", body["messages"][0]["content"]).group(1)


async def test_llm_filter_scores_each_document_from_the_models_reply(kb, llm):
    docs = ["orchards", "veltrix", "kelmor"]
    replies = [("7", 100, 1), ("Score: 3", 200, 2), ("9 - it answers", 300, 3)]
    llm.push(*(answer(text, tokens=usage(p, c)) for text, p, c in replies))
    result = await _call(_llm_kb(kb, llm.base_url), "filter_documents", {"query": FOUNDER, "doc_ids": docs})
    assert not result.is_error
    content = result.structured_content
    assert content["scorer"] == f"llm:{MODEL}"
    # One request per document, each answered by the next scripted reply in the order they arrived.
    requests = llm.chat_requests
    assert sorted(_prompt_doc(r) for r in requests) == sorted(docs)
    expected = {_prompt_doc(r): parse_score(text) for r, (text, _, _) in zip(requests, replies, strict=True)}
    assert {r["doc_id"]: r["relevance"] for r in content["results"]} == expected
    assert [r["relevance"] for r in content["results"]] == [9, 7, 3]
    assert content["relevant_doc_ids"] == [r["doc_id"] for r in content["results"][:2]]
    for body in requests:
        assert body["model"] == MODEL and body["max_tokens"] == 8
        assert FOUNDER in body["messages"][0]["content"]
    veltrix = next(r for r in requests if _prompt_doc(r) == "veltrix")["messages"][0]["content"]
    assert PASSAGES[3].text in veltrix
    accounting = result.meta[META_ACCOUNTING]
    assert accounting["stage"] == "filtering"
    assert (accounting["llm_prompt_tokens"], accounting["llm_completion_tokens"]) == (600, 6)
    assert accounting["llm_ms"] > 0


async def test_llm_filter_scores_a_reply_without_a_number_zero(kb, llm):
    llm.push(answer("I cannot tell."))
    result = await _call(_llm_kb(kb, llm.base_url), "filter_documents", {"query": FOUNDER, "doc_ids": ["veltrix"]})
    assert result.structured_content["results"][0]["relevance"] == 0


async def test_llm_generate_returns_the_models_answer(kb, llm):
    llm.push(answer(" Arlen Voss \n", tokens=usage(321, 4)))
    result = await _call(_llm_kb(kb, llm.base_url), "generate_answer", {"query": FOUNDER, "doc_ids": ["veltrix"]})
    assert not result.is_error
    content = result.structured_content
    assert content["answer"] == "Arlen Voss" and content["reader"] == f"llm:{MODEL}"
    [body] = llm.chat_requests
    system, user = body["messages"]
    assert system == {"role": "system", "content": ANSWER_SYSTEM}
    assert user["content"].startswith("Documents:\n[veltrix] Veltrix Holdings\n")
    assert user["content"].endswith(f"Question: {FOUNDER}")
    accounting = result.meta[META_ACCOUNTING]
    assert accounting["stage"] == "generation"
    assert (accounting["llm_prompt_tokens"], accounting["llm_completion_tokens"]) == (321, 4)


async def test_llm_generate_uses_the_model_asked_for_and_reads_unknown_as_no_answer(kb, llm):
    llm.push(answer("unknown"))
    result = await _call(_llm_kb(kb, llm.base_url), "generate_answer",
                         {"query": FOUNDER, "doc_ids": ["orchards"], "model": "other-model"})
    assert result.structured_content["answer"] == "" and result.structured_content["reader"] == "llm:other-model"
    assert llm.chat_requests[0]["model"] == "other-model"


async def test_a_failing_endpoint_is_a_tool_error(kb, llm):
    llm.push(error(500, "the model crashed"), error(500, "the model crashed"))
    failing = _llm_kb(kb, llm.base_url)
    for tool, stage in (("filter_documents", "filtering"), ("generate_answer", "generation")):
        result = await _call(failing, tool, {"query": FOUNDER, "doc_ids": ["veltrix"]})
        assert f"the LLM endpoint failed: HTTP 500 from {llm.base_url}: the model crashed" in _error(result)
        assert result.meta[META_ACCOUNTING]["stage"] == stage


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_endpoint_is_a_tool_error(kb):
    port = _closed_port()
    closed = _llm_kb(kb, f"http://127.0.0.1:{port}/v1")
    for tool in ("filter_documents", "generate_answer"):
        message = _error(await _call(closed, tool, {"query": FOUNDER, "doc_ids": ["veltrix"]}))
        assert f"the LLM endpoint failed: could not connect to http://127.0.0.1:{port}/v1" in message


async def test_a_failed_endpoint_is_an_infrastructure_failure_not_an_agent_error(kb):
    # The tool could not do its work: the result is marked so the task is not recorded as answered without it.
    closed = _llm_kb(kb, f"http://127.0.0.1:{_closed_port()}/v1")
    for tool in ("filter_documents", "generate_answer"):
        result = await _call(closed, tool, {"query": FOUNDER, "doc_ids": ["veltrix"]})
        ok, outcome, _, _ = classify_result(result)
        assert not ok and outcome == "upstream_unavailable" and outcome in INFRA_OUTCOMES
    # Bad arguments stay the agent's own error.
    _, outcome, _, _ = classify_result(await _call(closed, "generate_answer", {"query": FOUNDER, "doc_ids": ["nope"]}))
    assert outcome == "tool_error"
