"""Pinned tool parameters (`fixed_params`) and schema defaults that follow the gateway's `--default-top-k`."""

from __future__ import annotations

import json

import httpx
import pytest
from mcp.client.client import Client

from rollout.errors import ConfigError
from rollout.gateway.cli import main
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.plan import plan_gateway
from rollout.gateway.server import build_gateway
from rollout.gateway_file import GatewayFile
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from tests.gateway.loopback import gateway_served, kb_from_flags

TOOL = "query_knowledge_base_sparse"
# Eight passages share the query word, twelve do not (a word in half the corpus or more scores 0 in
# BM25 and matches nothing): any top_k up to 8 returns exactly top_k passages.
PASSAGES = [Passage(f"k{i}", f"Kelmor {i}", f"Kelmor district {i} grows barley.") for i in range(8)] + [
    Passage(f"o{i}", f"Other {i}", f"Dravia harbour {i} ships salt.") for i in range(12)
]


def sparse_gateway(group: str | dict, *more: str | dict) -> GatewayFile:
    return GatewayFile.model_validate({"modules": [{"resource_type": "rag", "tool_groups": [group, *more]}]})


def pinned(top_k: object = 5) -> GatewayFile:
    return sparse_gateway({"name": "rag_query_sparse", "fixed_params": {"top_k": top_k}})


@pytest.fixture
def kb() -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)}, default_top_k=2)


async def list_and_call(gateway: GatewayFile, kb: KnowledgeBase, *arguments: dict) -> tuple[dict, list[int]]:
    """The tool's input schema and the number of passages each call returned."""
    async with Client(build_gateway(gateway, kb)) as client:
        schema = next(t for t in (await client.list_tools()).tools if t.name == TOOL).input_schema
        counts = []
        for args in arguments:
            result = await client.call_tool(TOOL, args)
            assert not result.is_error, result.content
            counts.append(len(result.structured_content["results"]))
    return schema, counts


async def test_a_pinned_parameter_is_hidden_and_every_call_runs_with_its_value(kb):
    schema, counts = await list_and_call(
        pinned(5), kb, {"query": "Kelmor"}, {"query": "Kelmor", "top_k": 1}, {"query": "Kelmor", "top_k": 8}
    )
    assert set(schema["properties"]) == {"query"}
    assert counts == [5, 5, 5]


async def test_without_a_pin_the_client_chooses_top_k(kb):
    schema, counts = await list_and_call(sparse_gateway("rag_query_sparse"), kb,
                                         {"query": "Kelmor"}, {"query": "Kelmor", "top_k": 1})
    assert set(schema["properties"]) == {"query", "top_k"}
    assert counts == [2, 1]


async def test_the_advertised_default_is_the_knowledge_base_default(kb):
    schema, counts = await list_and_call(sparse_gateway("rag_query_sparse"), kb, {"query": "Kelmor"})
    assert schema["properties"]["top_k"]["default"] == kb.default_top_k == 2
    assert counts == [2]


async def test_default_top_k_flag_sets_the_schema_default_and_the_results(tmp_path):
    kb = kb_from_flags(PASSAGES, tmp_path, "--default-top-k", "3")
    schema, counts = await list_and_call(sparse_gateway("rag_query_sparse"), kb, {"query": "Kelmor"})
    assert schema["properties"]["top_k"]["default"] == 3
    assert counts == [3]


async def test_document_search_advertises_the_knowledge_base_default_too(kb):
    kb.default_max_docs = 4
    async with Client(build_gateway(sparse_gateway("rag_search"), kb)) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool("search_documents", {"query": "Kelmor"})
    assert tool.input_schema["properties"]["max_files"]["default"] == 4
    assert len(result.structured_content["results"]) == 4


def test_the_proxy_runs_with_the_pinned_value_and_healthz_and_the_catalog_list_the_pins(kb, tmp_path):
    with gateway_served(pinned(5), kb, tmp_path) as base:
        sent = [httpx.post(f"{base}/proxy/tools/{TOOL}/call", json=body, timeout=30)
                for body in ({"query": "Kelmor", "top_k": 1}, {"query": "Kelmor"})]
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        listed = {t["name"]: t for t in httpx.get(f"{base}/proxy/tools", timeout=10).json()["tools"]}
    assert listed[TOOL]["fixed_params"] == {"top_k": 5}
    assert "top_k" not in listed[TOOL]["function"]["function"]["parameters"]["properties"]
    assert [r.status_code for r in sent] == [200, 200]
    assert [len(r.json()["structured_content"]["results"]) for r in sent] == [5, 5]
    assert health["fixed_params"] == {TOOL: {"top_k": 5}}


def test_pins_apply_to_their_group_only(kb):
    gateway = sparse_gateway({"name": "rag_query_sparse", "fixed_params": {"top_k": 4}}, "rag_search")
    pins = {t.fn.__name__: dict(t.fixed_params) for t in plan_gateway(gateway).tools}
    assert pins == {TOOL: {"top_k": 4}, "search_documents": {}}


def test_an_unknown_pinned_parameter_fails_naming_group_parameter_and_the_tools_parameters():
    gateway = sparse_gateway({"name": "rag_query_sparse", "fixed_params": {"topk": 5}})
    with pytest.raises(ConfigError) as e:
        plan_gateway(gateway)
    msg = str(e.value)
    assert "'rag_query_sparse'" in msg and "'topk'" in msg
    assert f"{TOOL} takes query, top_k" in msg and "fixed_params" in msg


def test_a_pinned_value_the_schema_rejects_fails_at_start():
    with pytest.raises(ConfigError) as e:
        plan_gateway(pinned("five"))
    msg = str(e.value)
    assert "'rag_query_sparse' pins 'top_k' to 'five'" in msg and "rejects" in msg and "takes query, top_k" in msg


def test_the_gateway_command_refuses_a_bad_pin_before_loading_anything(tmp_path, capsys):
    path = tmp_path / "gw.json"
    path.write_text(json.dumps({"modules": [{"resource_type": "rag", "tool_groups": [
        {"name": "rag_query_sparse", "fixed_params": {"k": 5}}]}]}))
    assert main(["--config", str(path), "--port", "0", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "error: tool group 'rag_query_sparse' pins 'k'" in err
    assert not (tmp_path / "cache").exists()
