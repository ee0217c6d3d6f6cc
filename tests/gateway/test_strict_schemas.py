"""Every tool schema rollout offers is one a strict function-calling client accepts.

Each shipped gateway file, and each registered tool group on its own, is served by the real gateway (in-memory
MCP client) over a small corpus with every index. Every offered tool is checked at both ends, the MCP tools/list
input schema and the OpenAI function spec converted from it (what the worker offers the model and
`/proxy/tools` lists): every property has a concrete `type` (recursively), none is an anyOf/oneOf with null,
every optional one states its default, and descriptions carry no docstring indentation. Omitting an optional
parameter must give what passing its stated default gives. verl's tool schema model (its `OpenAIFunction*Schema`
pydantic classes, written out here) must accept every tool.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
import uvicorn
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp_types import Tool
from pydantic import BaseModel

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway
from rollout.gateway.tools import builtin_registry
from rollout.gateway_file import GATEWAYS_DIR, GatewayFile, load_gateway_file
from rollout.mcp_client.schema import mcp_tool_to_function
from rollout.records import Passage
from rollout.retrieval import load_or_build_indexes
from rollout.wire import TOOLSETS_GROUP
from tests.gateway.loopback import (
    SPARSE_MODULE,
    gateway_file,
    gateway_served,
    serving,
    sparse_kb,
)

PASSAGES = [
    Passage("voss-0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961.", doc_id="voss"),
    Passage("voss-1", "Arlen Voss", "Voss founded the Kelmor glassworks and later Veltrix Holdings.", doc_id="voss"),
    Passage("veltrix", "Veltrix Holdings", "Veltrix Holdings makes textile looms. It was founded in 1988 by Arlen Voss."),
    Passage("kelmor", "Kelmor", "Kelmor is a port city in Dravia with a glassworks."),
    Passage("dravia", "Dravia", "Dravia is a country on the northern sea."),
]
QUESTION = "Who founded Veltrix Holdings?"

ARGUMENTS: dict[str, dict[str, Any]] = {
    "query_knowledge_base_dense": {"query": QUESTION, "top_k": 1},
    "query_knowledge_base_sparse": {"query": QUESTION, "top_k": 1},
    "query_knowledge_base_hybrid": {"query": QUESTION, "top_k": 1},
    "search_documents": {"query": QUESTION, "max_files": 1},
    "recall_documents": {"query": QUESTION, "max_tokens": 60, "doc_ids": ["voss", "kelmor"]},
    "retrieve_documents": {"query": QUESTION, "max_docs": 1},
    "filter_documents": {"query": QUESTION, "doc_ids": ["veltrix", "dravia"], "relevance_threshold": 3},
    "chunk_documents": {"doc_ids": ["voss", "kelmor"], "token_limit": 60, "query": "glassworks"},
    "generate_answer": {"query": QUESTION, "doc_ids": ["veltrix"], "model": "reader-x"},
    "search_sources": {"query": QUESTION, "path": "", "recursive": False, "max_docs": 1},
    "visualize_doc_relevance": {"doc_ids": ["veltrix", "voss"], "query": "founded"},
    "get_corpus_info": {},
    "search": {"query": QUESTION, "k": 1},
    "search_bm25": {"query": QUESTION, "k": 1},
    "search_dense": {"query": QUESTION, "k": 1},
    "get_document": {"docid": "voss"},
    "list_toolsets": {},
    "activate_toolset": {"names": ["rag_query"]},
    "deactivate_toolset": {"names": ["rag_query"]},
}
"""Valid arguments for every tool the gateway can serve, optional ones included (each is then left out, or set to
its stated default, in turn). A tool missing here fails the tests: a new tool cannot slip past them."""
NOT_CALLED = {"list_toolsets", "activate_toolset", "deactivate_toolset"}
"""Tools with no optional parameter whose calls need a task's tool-set state; their schemas are still checked."""
IGNORED_HERE = {"generate_answer": {"model"}, "search_sources": {"path", "recursive"}}
"""Parameters whose value makes no difference here (no LLM endpoint; a corpus not made from a folder): left out and
set to the default they are still compared, but the table's value cannot differ from the default's result."""

SHIPPED = sorted(GATEWAYS_DIR.glob("*.json"))
LOCAL_GROUPS = [g for g in builtin_registry().group_names if builtin_registry().group(g).resource_type != TOOLSETS_GROUP]
DOCSTRING_INDENT = re.compile(r"^ {4,}\S", re.MULTILINE)


@pytest.fixture(scope="module")
def kb(cache_dir) -> Iterator[KnowledgeBase]:
    retrievers = load_or_build_indexes(PASSAGES, cache_dir, which=["hybrid"])
    yield KnowledgeBase(PASSAGES, retrievers, default_top_k=3, default_max_docs=4)
    retrievers["dense"].close()


def group_file(group: str) -> GatewayFile:
    return gateway_file({"resource_type": builtin_registry().group(group).resource_type, "tool_groups": [group]})


async def offered(gateway: GatewayFile, kb: KnowledgeBase) -> list[Tool]:
    async with Client(build_gateway(gateway, kb)) as client:
        return list((await client.list_tools()).tools)


# --- the rule ---


def property_problems(where: str, prop: Any) -> list[str]:
    """What a strict client refuses in one property schema, recursively into items and properties."""
    if not isinstance(prop, Mapping):
        return [f"{where}: not a schema object ({prop!r})"]
    problems = []
    kind = prop.get("type")
    if isinstance(kind, list):
        if not kind or "null" in kind or not all(isinstance(k, str) for k in kind):
            problems.append(f"{where}: type list {kind!r} (must be non-empty strings without null)")
    elif not isinstance(kind, str):
        problems.append(f"{where}: no concrete type ({dict(prop)})")
    for key in ("anyOf", "oneOf", "allOf"):
        if key in prop:
            problems.append(f"{where}: {key} at the property's top level ({prop[key]!r})")
    if "enum" in prop and kind is None:
        problems.append(f"{where}: enum without a type")
    items = prop.get("items")
    if items is not None:
        problems += property_problems(f"{where}.items", items)
    problems += object_problems(where, prop)
    problems += description_problems(where, prop.get("description"))
    return problems


def object_problems(where: str, schema: Mapping[str, Any]) -> list[str]:
    """Each property of an object schema, and a default for every one not required."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    problems = []
    for name, prop in properties.items():
        problems += property_problems(f"{where}.{name}", prop)
        if name not in required and not (isinstance(prop, Mapping) and "default" in prop):
            problems.append(f"{where}.{name}: optional without a stated default")
    return problems


def description_problems(where: str, description: Any) -> list[str]:
    if isinstance(description, str) and DOCSTRING_INDENT.search(description):
        return [f"{where}: description keeps docstring indentation ({description!r})"]
    return []


def tool_problems(tool: Tool) -> list[str]:
    """The rule on both ends: the MCP input schema and the OpenAI function spec converted from it."""
    function = mcp_tool_to_function(tool)["function"]
    problems = []
    for end, schema, description in (("inputSchema", tool.input_schema, tool.description),
                                     ("function", function["parameters"], function["description"])):
        if schema.get("type") != "object":
            problems.append(f"{tool.name} {end}: top level is not an object")
        problems += object_problems(f"{tool.name} {end}", schema)
        problems += description_problems(f"{tool.name} {end}", description)
    return problems


# verl's tool schema (verl/tools/schemas.py), written out: a property must have a string `type`.
class VerlProperty(BaseModel):
    type: str
    description: str | None = None
    enum: list[str] | None = None


class VerlParameters(BaseModel):
    type: str
    properties: dict[str, VerlProperty]
    required: list[str]


class VerlFunction(BaseModel):
    name: str
    description: str
    parameters: VerlParameters
    strict: bool = False


class VerlTool(BaseModel):
    type: str
    function: VerlFunction


def as_verl_sees_it(name: str, description: str | None, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The spec verl validates for an MCP tool: the schema as listed, `required` filled with [] when absent
    (verl's `mcp2openai`)."""
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"required": [], **parameters}}}


def check(tools: list[Tool]) -> None:
    problems = [p for tool in tools for p in tool_problems(tool)]
    assert not problems, "\n".join(problems)
    for tool in tools:
        assert tool.name in ARGUMENTS, f"{tool.name} has no entry in ARGUMENTS: add valid arguments for it"
        VerlTool.model_validate(as_verl_sees_it(tool.name, tool.description, tool.input_schema))
        function = mcp_tool_to_function(tool)["function"]  # what the worker offers and /proxy/tools lists
        VerlTool.model_validate(as_verl_sees_it(function["name"], function["description"], function["parameters"]))


# --- the shipped files and every group ---


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
async def test_every_shipped_gateway_file_offers_strict_schemas(kb, path):
    tools = await offered(load_gateway_file(path), kb)
    check(tools)


@pytest.mark.parametrize("group", LOCAL_GROUPS)
async def test_every_registered_group_offers_strict_schemas(kb, group):
    tools = await offered(group_file(group), kb)
    assert tools, f"group {group} served no tool"
    check(tools)
    # The description the model reads is the docstring, dedented once, not the SDK's raw `__doc__`.
    for fn in builtin_registry().group(group).tools:
        [tool] = [t for t in tools if t.name == fn.__name__]
        assert tool.description == inspect.cleandoc(fn.__doc__)


def test_the_table_covers_every_registered_tool():
    registry = builtin_registry()
    names = {fn.__name__ for g in registry.group_names for fn in registry.group(g).tools}
    assert names <= set(ARGUMENTS), f"no ARGUMENTS entry for {sorted(names - set(ARGUMENTS))}"


def outcome(result: Any) -> tuple[bool, list[dict[str, Any]], Any]:
    return result.is_error, [c.model_dump() for c in result.content], result.structured_content


@pytest.mark.parametrize("group", LOCAL_GROUPS)
async def test_leaving_out_an_optional_parameter_gives_its_stated_default(kb, group):
    async with Client(build_gateway(group_file(group), kb)) as client:
        for tool in (await client.list_tools()).tools:
            if tool.name in NOT_CALLED:
                continue
            arguments = ARGUMENTS[tool.name]
            full = await client.call_tool(tool.name, arguments)
            assert not full.is_error, (tool.name, full.content)
            required = set(tool.input_schema.get("required") or [])
            for name, prop in tool.input_schema["properties"].items():
                if name in required:
                    continue
                rest = {k: v for k, v in arguments.items() if k != name}
                left_out = await client.call_tool(tool.name, rest)
                stated = await client.call_tool(tool.name, {**rest, name: prop["default"]})
                assert outcome(left_out) == outcome(stated), (tool.name, name)
                if name not in IGNORED_HERE.get(tool.name, ()):
                    # The table's value differs from the default, so the comparison above compared something.
                    assert outcome(full) != outcome(stated) or arguments.get(name) == prop["default"], (tool.name, name)


async def test_the_stated_defaults_are_the_gateways(kb):
    tools = {t.name: t for g in ("rag_query_sparse", "rag_search", "rag_sources") for t in await offered(group_file(g), kb)}
    assert tools["query_knowledge_base_sparse"].input_schema["properties"]["top_k"] == {
        "type": "integer", "default": 3, "description": "How many passages to return", "title": "Top K"}
    assert tools["search_documents"].input_schema["properties"]["max_files"]["default"] == 4
    assert tools["search_sources"].input_schema["properties"]["path"]["default"] == ""


async def test_an_explicit_null_is_refused_naming_the_parameter(kb):
    async with Client(build_gateway(group_file("rag_query_sparse"), kb)) as client:
        result = await client.call_tool("query_knowledge_base_sparse", {"query": QUESTION, "top_k": None})
    assert result.is_error and "top_k" in result.content[0].text


# --- the proxy's catalog, and upstream tools as their server wrote them ---


def test_the_proxy_catalog_offers_strict_function_specs(kb):
    groups = ["rag_query", "rag_query_sparse", "rag_query_hybrid", "rag_search", "rag_recall", "rag_retrieve_hybrid",
              "rag_filter", "rag_chunk", "rag_generate", "rag_sources", "rag_visualize"]
    gateway = gateway_file({"resource_type": "rag", "tool_groups": groups},
                           {"resource_type": "system", "tool_groups": ["system_info"]})
    with gateway_served(gateway, kb) as base:
        catalog = httpx.get(f"{base}/proxy/tools", timeout=30).json()["tools"]
    assert len(catalog) == len(groups) + 1
    for entry in catalog:
        function = entry["function"]["function"]  # the whole spec: {"type": "function", "function": {...}}
        tool = Tool(name=function["name"], description=function["description"], input_schema=function["parameters"])
        assert not tool_problems(tool), tool_problems(tool)
        VerlTool.model_validate(as_verl_sees_it(function["name"], function["description"], function["parameters"]))


def indented_upstream() -> MCPServer:
    server = MCPServer("indented", log_level="WARNING")

    @server.tool()
    def lookup(key: str, limit: int | None = None) -> str:
        """Look a key up.

        The upstream's own words, indented as its author wrote them.
        """
        return key

    return server


async def test_upstream_tools_are_passed_through_as_the_upstream_wrote_them():
    uv = uvicorn.Server(uvicorn.Config(indented_upstream().streamable_http_app(), log_level="warning"))
    with serving(uv) as base:
        upstream = {"resource_type": "rag", "source": "mcp", "name": "calc", "url": f"{base}/mcp"}
        server = build_gateway(gateway_file(SPARSE_MODULE, upstream), sparse_kb())
        async with server.running(), Client(server) as client, Client(indented_upstream()) as direct:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            [original] = (await direct.list_tools()).tools
    assert tools["lookup"].description == original.description and "\n        The upstream" in original.description
    assert tools["lookup"].input_schema == original.input_schema
    assert "anyOf" in original.input_schema["properties"]["limit"]
