"""BrowseComp-Plus' tools over a real MCP client, on the miniature BrowseComp-Plus (tests/data/browsecomp_fixture.py):
search's documents, scores and snippets, get_document's whole text, what each call records, and the three gateway
files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client.client import Client
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from rollout.data import CorpusSpec, open_corpus
from rollout.data.corpus_store import CorpusStore
from rollout.errors import RetrievalError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.launch import load_knowledge_base, parse_args
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway.tools.browsecomp import snippet
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.llm.token_count import TokenCounter, load_token_counter
from rollout.retrieval import load_or_build_indexes
from rollout.retrieval.params import RetrievalParams
from rollout.wire import META_CALL_ID
from tests.conftest import shared_by_workers
from tests.data.browsecomp_fixture import BrowseCompFixture, write_fixture
from tests.gateway.loopback import gateway_file

QUESTION = "What is the harbor code of the Velmora Institute?"
VELMORA_PAGE = "10000"
THREE_NAMES = "Velmora Institute, Quorran Observatory, Tessaly Mill"
"""A query more than five pages share a word with (BM25 lists only those)."""


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> BrowseCompFixture:
    return write_fixture(shared_by_workers(tmp_path_factory) / "browsecomp-fixture")


@pytest.fixture(scope="module")
def store(fixture: BrowseCompFixture, cache_dir: Path) -> CorpusStore:
    return open_corpus(CorpusSpec(path=str(fixture.corpus_jsonl), columns={"id": "docid", "text": "text"}), cache_dir)


@pytest.fixture(scope="module")
def kb(store: CorpusStore, cache_dir: Path, encoder) -> Iterator[KnowledgeBase]:
    """BM25 and dense over whole documents (the bundled encoder on torch; dense over passages is
    tests/retrieval/test_doc_passages.py's)."""
    retrievers = load_or_build_indexes(store, cache_dir, which=["sparse", "dense"], encoder=encoder)
    yield KnowledgeBase(store, retrievers)
    retrievers["dense"].close()


async def call(kb: KnowledgeBase, gateway: str, name: str, arguments: dict, collector: StatsCollector | None = None):
    async with Client(build_gateway(load_gateway_file(GATEWAYS_DIR / gateway), kb, collector)) as client:
        return await client.call_tool(name, arguments, meta={META_CALL_ID: f"{name}-call"})


def test_the_three_gateway_files_offer_browsecomp_plus_tools_with_k_pinned_to_five():
    offered = {}
    for arm in ("bm25", "dense", "both"):
        plan = plan_gateway(load_gateway_file(GATEWAYS_DIR / f"bcp_{arm}.json"))
        offered[arm] = {t.fn.__name__: dict(t.fixed_params) for t in plan.tools}
        assert set(plan.requires) == {"bm25": {"sparse"}, "dense": {"dense"}, "both": {"sparse", "dense"}}[arm]
    assert offered["bm25"] == offered["dense"] == {"search": {"k": 5}, "get_document": {}}
    assert offered["both"] == {"search_bm25": {"k": 5}, "search_dense": {"k": 5}, "get_document": {}}


async def test_the_model_is_offered_search_with_a_query_only_and_get_document_with_a_docid(kb):
    async with Client(build_gateway(load_gateway_file(GATEWAYS_DIR / "bcp_both.json"), kb)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == ["search_bm25", "search_dense", "get_document"]
    assert set(tools["search_bm25"].input_schema["properties"]) == {"query"}  # k is the gateway's (fixed_params)
    assert set(tools["get_document"].input_schema["properties"]) == {"docid"}
    assert "BM25" in tools["search_bm25"].description and "semantic" in tools["search_dense"].description


async def test_search_returns_five_whole_documents_each_with_its_first_512_tokens(kb, fixture):
    top = json.loads((await call(kb, "bcp_bm25.json", "search", {"query": QUESTION})).content[0].text)
    assert top[0]["docid"] == VELMORA_PAGE  # the page named most often; BM25 lists only pages sharing a word
    result = await call(kb, "bcp_bm25.json", "search", {"query": THREE_NAMES})
    assert not result.is_error
    hits = json.loads(result.content[0].text)  # what the model reads: BrowseComp-Plus' list of hits
    assert [set(hit) for hit in hits] == [{"docid", "score", "snippet"}] * 5
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    counter = load_token_counter(None)  # the fallback: the gateway's tokenizer, itself the bundled encoder's
    for hit in hits:
        text = fixture.documents[hit["docid"]]
        assert text.startswith(hit["snippet"])  # the document's own beginning, not a decoded one
        assert 500 < counter.count(hit["snippet"]) <= 512 < counter.count(text)
    structured = result.structured_content["results"]
    assert [h["doc_id"] for h in structured] == [h["docid"] for h in hits] and structured[0]["rank"] == 1


async def test_dense_search_ranks_the_documents_whole(kb):
    result = await call(kb, "bcp_dense.json", "search", {"query": QUESTION})
    docids = [hit["docid"] for hit in json.loads(result.content[0].text)]
    assert len(docids) == len(set(docids)) == 5 and VELMORA_PAGE in docids


async def test_get_document_returns_the_original_text_and_an_unknown_docid_is_an_error_the_model_reads(kb, fixture):
    result = await call(kb, "bcp_both.json", "get_document", {"docid": VELMORA_PAGE})
    assert not result.is_error
    read = json.loads(result.content[0].text)
    assert read == {"docid": VELMORA_PAGE, "text": fixture.documents[VELMORA_PAGE]}  # byte for byte
    assert "The harbor code of the Velmora Institute is Amber Lantern." in read["text"]
    missing = await call(kb, "bcp_both.json", "get_document", {"docid": "99999"})
    assert missing.is_error and "unknown docid '99999'" in missing.content[0].text


async def test_each_call_records_the_docids_it_returned(kb, tmp_path):
    collector = StatsCollector(tmp_path / "tool_stats")
    try:
        searched = await call(kb, "bcp_both.json", "search_dense", {"query": QUESTION}, collector)
        await call(kb, "bcp_both.json", "get_document", {"docid": VELMORA_PAGE}, collector)
    finally:
        collector.close()
    lines = [json.loads(line) for line in (tmp_path / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    assert [line["tool_name"] for line in lines] == ["search_dense", "get_document"]
    assert lines[0]["result_ids"] == [hit["docid"] for hit in json.loads(searched.content[0].text)]
    assert lines[1]["result_ids"] == [VELMORA_PAGE]


async def test_k_and_the_snippet_length_are_settings(kb, tmp_path):
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # one token a word: the snippet is the first words
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    kb.snippet_tokens, kb.snippet_tokenizer = 12, load_token_counter(str(tmp_path))
    try:
        result = await call(kb, "bcp_bm25.json", "search", {"query": THREE_NAMES, "k": 2})  # pinned: k stays 5
        hits = json.loads(result.content[0].text)
        assert len(hits) == 5 and all(len(hit["snippet"].split()) == 12 for hit in hits)
        unpinned = gateway_file({"resource_type": "rag", "tool_groups": ["bcp_bm25"]})
        async with Client(build_gateway(unpinned, kb)) as client:
            two = await client.call_tool("search", {"query": THREE_NAMES, "k": 2})  # not pinned: the model's k
        assert len(json.loads(two.content[0].text)) == 2
    finally:
        kb.snippet_tokens, kb.snippet_tokenizer = 512, None


def test_the_gateway_loads_the_snippet_tokenizer_its_retriever_config_names(fixture, tmp_path):
    args = parse_args(["--config", "unused.json", "--corpus", str(fixture.corpus_jsonl),
                       "--cache-dir", str(tmp_path / "cache")])
    params = RetrievalParams.from_dict({"snippet": {"max_tokens": 64, "tokenizer": str(tmp_path / "none")}})
    with pytest.raises(RetrievalError, match=r"^retriever\.snippet\.tokenizer="):
        load_knowledge_base(args, [], params)
    from rollout.paths import bundled_model_path

    named = RetrievalParams.from_dict({"snippet": {"max_tokens": 64, "tokenizer": bundled_model_path()}})
    kb = load_knowledge_base(args, [], named)
    assert kb.snippet_tokens == 64 and kb.snippet_counter().name == bundled_model_path()


@pytest.mark.parametrize("tokenizer", ["wordpiece", "byte-level-bpe"])
def test_a_snippet_cut_from_the_beginning_of_a_document_is_the_cut_of_the_whole(fixture, tokenizer):
    texts = [*fixture.documents.values(), "x" * 5000 + " a long word first", "a short text"]
    if tokenizer == "wordpiece":
        counter = load_token_counter(None)
    else:  # Qwen's kind: a byte-level BPE, which joins the space before a word to it (trained here, offline)
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, show_progress=False))
        counter = TokenCounter(bpe, "bpe")
    for max_tokens in (7, 100, 512, 3000):
        assert [snippet(counter, text, max_tokens) for text in texts] == [counter.truncate(text, max_tokens)
                                                                           for text in texts]
