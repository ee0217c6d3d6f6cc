"""The step tools' own LLM replies keep their finish_reason: a reply cut at its token limit (`length`) is counted in
the call's accounting (`llm_truncated`), and generate_answer marks a cut answer. Against the scripted chat server."""

from __future__ import annotations

import pytest
from mcp.client.client import Client

from rollout.accounting import CallAccounting
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway
from rollout.gateway.steps import StepSettings
from rollout.llm.chat_client import LLMSettings
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.wire import META_ACCOUNTING
from tests.agents.chat_server import MODEL, ChatServer, answer, usage
from tests.gateway.loopback import gateway_file

PASSAGES = [
    Passage("veltrix", "Veltrix Holdings", "Veltrix Holdings makes textile looms. It was founded in 1988 by Arlen Voss."),
    Passage("kelmor", "Kelmor", "Kelmor is a port city in Dravia with a glassworks."),
]
FOUNDER = "Who founded Veltrix Holdings?"


@pytest.fixture
def llm(server: ChatServer) -> ChatServer:
    server.reset()
    return server


def _kb(base_url: str) -> KnowledgeBase:
    settings = LLMSettings(base_url=base_url, model=MODEL, api_key_env=None, max_retries=0, timeout_s=10)
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)}, steps=StepSettings(llm=settings))


async def _call(kb: KnowledgeBase, name: str, group: str, arguments: dict):
    async with Client(build_gateway(gateway_file({"resource_type": "rag", "tool_groups": [group]}), kb)) as c:
        return await c.call_tool(name, arguments)


async def test_an_answer_cut_at_its_token_limit_is_marked_and_counted(llm):
    llm.push(answer("Arlen Vo", tokens=usage(300, 4), finish_reason="length"))
    result = await _call(_kb(llm.base_url), "generate_answer", "rag_generate", {"query": FOUNDER, "doc_ids": ["veltrix"]})
    assert not result.is_error
    assert result.structured_content["answer"] == "Arlen Vo" and result.structured_content["truncated"] is True
    accounting = result.meta[META_ACCOUNTING]
    assert accounting["llm_truncated"] == 1 and accounting["llm_completion_tokens"] == 4
    assert CallAccounting.from_json(accounting).llm_truncated == 1  # as the trajectory's tool call record reads it


async def test_a_whole_answer_is_not_marked(llm):
    llm.push(answer("Arlen Voss", finish_reason="stop"))
    result = await _call(_kb(llm.base_url), "generate_answer", "rag_generate", {"query": FOUNDER, "doc_ids": ["veltrix"]})
    assert result.structured_content["truncated"] is False and result.meta[META_ACCOUNTING]["llm_truncated"] == 0


async def test_filter_replies_cut_at_their_token_limit_are_counted(llm):
    # One document's score reply is cut, the other's is whole; a server sending no finish_reason is not a cut.
    llm.push(answer("The docu", finish_reason="length"), answer("8", finish_reason=None))
    result = await _call(_kb(llm.base_url), "filter_documents", "rag_filter",
                         {"query": FOUNDER, "doc_ids": ["veltrix", "kelmor"]})
    assert not result.is_error
    assert result.meta[META_ACCOUNTING]["llm_truncated"] == 1


def test_accounting_of_older_gateways_reads_as_nothing_cut():
    old = {"stage": "generation", "context_tokens": 12, "llm_prompt_tokens": 300, "llm_completion_tokens": 4,
           "llm_ms": 9.0}
    assert CallAccounting.from_json(old) == CallAccounting("generation", 12, 300, 4, 9.0, llm_truncated=0)
