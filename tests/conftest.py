"""Shared fixtures: a real gateway on loopback HTTP, run in a background thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from rollout.gateway.config import load_gateway_file
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.server import bind_socket, build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector


@contextlib.contextmanager
def gateway_on_loopback(gateway_file: Path, kb: KnowledgeBase, run_dir: Path | None = None) -> Iterator[str]:
    """Serve `gateway_file` over streamable HTTP on 127.0.0.1 and yield its MCP URL; stats go to run_dir/tool_stats."""
    collector = StatsCollector(run_dir / "tool_stats") if run_dir is not None else None
    uv = make_uvicorn(build_gateway(load_gateway_file(gateway_file), kb, collector))
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=lambda: asyncio.run(uv.serve(sockets=[sock])), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.05)
    try:
        yield f"{base}/mcp"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        sock.close()
        if collector is not None:
            collector.close()
