"""Upstream MCP servers: a second real MCPServer on loopback proxied as one more tool set."""

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from typing import Annotated

import pytest
import uvicorn
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from pydantic import WithJsonSchema

from envs import HttpMCPRagEnv
from rollout.errors import ConfigError, GatewayError
from rollout.gateway.server import build_gateway
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import load_gateway_file
from rollout.listen import bind_socket
from rollout.paths import PROJECT_ROOT
from rollout.report import load_calls
from rollout.wire import META_CALL_ID, META_SOURCE, META_TASK_ID
from tests.gateway.loopback import (
    SPARSE_MODULE,
    gateway_file,
    gateway_served,
    serving,
    sparse_kb,
    upstream_on_loopback,
    upstream_server,
)

UNREACHABLE = "http://127.0.0.1:9/mcp"


def calc_module(url, **extra):
    return {"resource_type": "rag", "source": "mcp", "name": "calc", "url": url, **extra}


@pytest.fixture(scope="module")
def upstream_url():
    with upstream_on_loopback() as url:
        yield url


async def test_upstream_tools_are_listed_with_their_schemas_and_callable(upstream_url, tmp_path):
    collector = StatsCollector(tmp_path / "tool_stats")
    server = build_gateway(gateway_file(SPARSE_MODULE, calc_module(upstream_url)), sparse_kb(), collector)
    async with server.running(), Client(server) as client, Client(upstream_server()) as direct:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        originals = {t.name: t for t in (await direct.list_tools()).tools}
        added = await client.call_tool("add", {"a": 2, "b": 40}, meta={META_CALL_ID: "c1", META_TASK_ID: "t1"})
        bad = await client.call_tool("add", {"a": "two", "b": 40}, meta={META_CALL_ID: "c2"})
        local = await client.call_tool("query_knowledge_base_sparse", {"query": "ORG-5521"}, meta={META_CALL_ID: "c3"})
    collector.close()
    assert list(tools) == ["query_knowledge_base_sparse", "echo", "add", "slow"]
    assert tools["add"].input_schema == originals["add"].input_schema
    assert tools["add"].meta["rollout/group"] == "calc" and tools["add"].meta[META_SOURCE] == "mcp"
    assert tools["add"].meta["rollout/upstream"] == upstream_url
    assert not added.is_error and added.structured_content == {"result": 42}
    assert added.meta["io.modelcontextprotocol/serverInfo"]["name"] == "gw-test"  # this gateway's, not the upstream's
    assert bad.is_error and not local.is_error
    stats = load_calls(tmp_path)
    assert stats["call_id"].tolist() == ["c1", "c2", "c3"]
    assert stats["tool_name"].tolist() == ["add", "add", "query_knowledge_base_sparse"]
    assert stats["outcome"].tolist() == ["ok", "invalid_arguments", "ok"]
    assert stats.loc[0, "task_id"] == "t1"


async def test_tools_subset_is_honored(upstream_url):
    server = build_gateway(gateway_file(calc_module(upstream_url, tools=["add"])), sparse_kb())
    async with server.running(), Client(server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        hidden = await client.call_tool("echo", {"text": "hi"})
    assert names == ["add"]
    assert hidden.is_error and "Unknown tool" in hidden.content[0].text


async def test_subset_naming_a_missing_tool_lists_what_the_upstream_offers(upstream_url):
    server = build_gateway(gateway_file(calc_module(upstream_url, tools=["add", "multiply"])), sparse_kb())
    with pytest.raises(GatewayError, match="has no tool 'multiply'. It offers: echo, add, slow"):
        async with server.running():
            pass


async def test_unreachable_upstream_is_a_startup_error_naming_the_url():
    server = build_gateway(gateway_file(calc_module(UNREACHABLE)), sparse_kb())
    with pytest.raises(GatewayError, match=r"upstream MCP server http://127\.0\.0\.1:9/mcp \(tool set 'calc'\) is unreachable"):
        async with server.running():
            pass


def test_cli_refuses_to_start_with_an_unreachable_upstream(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d0", "contents": "Kelmor\nKelmor is a city."}) + "\n")
    config = tmp_path / "gw.json"
    config.write_text(json.dumps({"modules": [calc_module(UNREACHABLE)]}))
    proc = subprocess.run(
        [sys.executable, "-m", "rollout.gateway", "--config", str(config), "--corpus", str(corpus),
         "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path), "--port", "0"],
        capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT,
    )
    assert proc.returncode == 2
    assert "error: upstream MCP server http://127.0.0.1:9/mcp (tool set 'calc') is unreachable" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_an_upstream_that_dies_gives_error_results_and_comes_back(tmp_path):
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    collector = StatsCollector(tmp_path / "tool_stats")
    with contextlib.ExitStack() as upstream:
        url = upstream.enter_context(upstream_on_loopback(sock))
        server = build_gateway(gateway_file(calc_module(url)), sparse_kb(), collector)
        async with server.running(), Client(server) as client:
            before = await client.call_tool("echo", {"text": "up"})
            upstream.close()
            down = await client.call_tool("echo", {"text": "down"})
            upstream.enter_context(upstream_on_loopback(bind_socket("127.0.0.1", port)))
            deadline = time.monotonic() + 10
            while (after := await client.call_tool("echo", {"text": "back"})).is_error:
                assert time.monotonic() < deadline, after.content[0].text
                await asyncio.sleep(0.2)
    collector.close()
    assert not before.is_error and after.structured_content == {"result": "back"}
    assert down.is_error and f"upstream MCP server {url} (tool set 'calc') is unavailable" in down.content[0].text
    outcomes = load_calls(tmp_path)["outcome"].tolist()
    assert outcomes[0] == "ok" and outcomes[-1] == "ok"
    assert set(outcomes[1:-1]) == {"upstream_unavailable"}


def test_upstream_module_needs_url_and_name(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"modules": [{"resource_type": "rag", "source": "mcp", "name": "calc"}]}))
    with pytest.raises(ConfigError, match='needs "url"'):
        load_gateway_file(path)
    path.write_text(json.dumps({"modules": [{"resource_type": "rag", "url": UNREACHABLE}]}))
    with pytest.raises(ConfigError, match='add "source": "mcp"'):
        load_gateway_file(path)


async def test_upstream_tool_clashing_with_a_local_tool_is_refused(upstream_url):
    module = calc_module(upstream_url, name="other")
    server = build_gateway(gateway_file(SPARSE_MODULE, module, calc_module(upstream_url)), sparse_kb())
    with pytest.raises(GatewayError, match="tool 'echo' of the upstream .* is also served by the upstream"):
        async with server.running():
            pass


async def test_rag_env_offers_the_upstream_tool_set(upstream_url, tmp_path):
    gw = gateway_file(SPARSE_MODULE, calc_module(upstream_url, tools=["add"]))
    path = tmp_path / "gw.json"
    path.write_text(gw.model_dump_json())
    with gateway_served(gw, sparse_kb(), tmp_path) as base:
        async with HttpMCPRagEnv(f"{base}/mcp", path, worker_id="w1") as env:
            names = [s["function"]["name"] for s in env.tool_specs]
            result = await env.for_task("t9").call_tool("add", {"a": 1, "b": 2})
    assert names == ["query_knowledge_base_sparse", "add"]
    assert result.ok and result.structured == {"result": 3}
    stats = load_calls(tmp_path)
    assert stats["tool_name"].tolist() == ["add"] and stats["worker_id"].tolist() == ["w1"]


def broken_schema_upstream() -> MCPServer:
    """An upstream whose `lookup` tool's input schema refers to a remote document, which is never fetched."""
    server = MCPServer("odd-upstream", log_level="WARNING")

    @server.tool()
    def lookup(key: Annotated[dict, WithJsonSchema({"$ref": "https://schemas.example/key.json"})]) -> str:
        """Look a key up."""
        return json.dumps(key, sort_keys=True)

    return server


async def test_an_upstream_tool_whose_schema_cannot_be_converted_is_served_with_a_plain_object(tmp_path, caplog):
    uv = uvicorn.Server(uvicorn.Config(broken_schema_upstream().streamable_http_app(), log_level="warning"))
    with serving(uv) as base, caplog.at_level(logging.WARNING, logger="rollout.gateway.upstream"):
        gw = gateway_file(SPARSE_MODULE, calc_module(f"{base}/mcp", name="odd"))
        path = tmp_path / "gw.json"
        path.write_text(gw.model_dump_json())
        with gateway_served(gw, sparse_kb(), tmp_path) as gateway:
            async with HttpMCPRagEnv(f"{gateway}/mcp", path, worker_id="w1") as env:
                specs = {s["function"]["name"]: s["function"] for s in env.tool_specs}
                result = await env.for_task("t1").call_tool("lookup", {"key": {"a": 1}})
    assert specs["lookup"]["parameters"] == {"type": "object"}
    assert result.ok and result.text == '{"a": 1}'
    assert "'lookup'" in caplog.text and "https://schemas.example/key.json" in caplog.text
