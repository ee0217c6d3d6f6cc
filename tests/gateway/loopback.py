"""Real servers on 127.0.0.1 for gateway tests: the gateway's app and a second MCP server as upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.gateway_file import GatewayFile
from rollout.listen import bind_socket
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.run.gateway_process import GatewayProcess

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Veltrix Holdings", "Veltrix Holdings makes textile looms. Registry code ORG-5521."),
    Passage("d2", "Kelmor", "Kelmor is a city in Dravia."),
]
SPARSE_MODULE = {"resource_type": "rag", "tool_groups": ["rag_query_sparse"]}


def sparse_kb() -> KnowledgeBase:
    return KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})


def gateway_file(*modules: dict[str, Any], name: str = "gw-test") -> GatewayFile:
    return GatewayFile.model_validate({"server_name": name, "modules": list(modules)})


def upstream_server() -> MCPServer:
    """A plain `mcp` server: echo, add and a slow tool."""
    server = MCPServer("upstream", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return "done"

    return server


@contextlib.contextmanager
def serving(uv: uvicorn.Server, sock: socket.socket | None = None) -> Iterator[str]:
    """Run `uv` in a thread on `sock` (default: a free loopback port); yield `http://127.0.0.1:PORT`."""
    sock = sock or bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(uv.serve(sockets=[sock]))
        except BaseException as e:  # surfaced below
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"server did not start: {errors or 'startup failed (see log)'}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextlib.contextmanager
def upstream_on_loopback(sock: socket.socket | None = None) -> Iterator[str]:
    """Serve `upstream_server()` over streamable HTTP; yield its MCP URL."""
    uv = uvicorn.Server(uvicorn.Config(upstream_server().streamable_http_app(), log_level="warning"))
    with serving(uv, sock) as base:
        yield f"{base}/mcp"


@contextlib.contextmanager
def gateway_served(
    gateway: GatewayFile, kb: KnowledgeBase, run_dir: Path | None = None, **app_options: Any
) -> Iterator[str]:
    """Serve a gateway (stats to run_dir/tool_stats); yield its base URL. `app_options` go to `make_uvicorn`,
    except `tool_timeout_s`, which goes to `build_gateway`."""
    collector = StatsCollector(run_dir / "tool_stats") if run_dir is not None else None
    timeout = app_options.pop("tool_timeout_s", None)
    server = build_gateway(gateway, kb, collector, tool_timeout_s=timeout)
    try:
        with serving(make_uvicorn(server, **app_options)) as base:
            yield base
    finally:
        server.ledgers.close()  # the default collector, and those of the runs registered with POST /runs


def kill(gw: GatewayProcess) -> None:
    assert gw.pid is not None
    os.kill(gw.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10  # only so that a kill that did not work cannot hang the test
    while gw.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not gw.is_alive()


def kb_from_flags(passages: list[Passage], folder: Path, *flags: str) -> KnowledgeBase:
    """The knowledge base `python -m rollout.gateway` loads over `passages` (a FlashRAG corpus file in `folder`) with
    these command-line flags, its sparse index only."""
    from rollout.gateway.launch import load_knowledge_base, parse_args

    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "contents": f"{p.title}\n{p.text}"}) + "\n" for p in passages))
    args = parse_args(["--config", "unused.json", "--corpus", str(corpus), "--cache-dir", str(folder / "cache"), *flags])
    return load_knowledge_base(args, ["sparse"])
