"""A gateway process stops soon after SIGTERM with many sessions open and calls hung in tool threads,
and the calls it answered are all in its ledger."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rollout.mcp_client.session import McpSession
from rollout.paths import PROJECT_ROOT

SESSIONS = 32
HUNG = 4
STOP_BOUND_S = 10.0
"""A liveness bound, not a benchmark: before the fix a hung call held the exit until the tool returned."""


def hang(query: str) -> str:
    """Blocks its thread for ten minutes: a tool that never answers in time."""
    threading.Event().wait(600)
    return "late"


def answer(query: str) -> str:
    """Answers at once."""
    return f"echo {query}"


def serve_hanging_gateway(run_dir: str, ready_file: str) -> None:
    """The gateway process of the test: `serve()` with a hanging and a quick tool, exiting as `rollout.gateway` does."""
    from rollout.gateway.knowledge import KnowledgeBase
    from rollout.gateway.registry import ToolRegistry
    from rollout.gateway.server import build_gateway, serve
    from rollout.gateway.stats import StatsCollector
    from rollout.listen import bind_socket
    from rollout.records import Passage
    from tests.gateway.loopback import gateway_file

    registry = ToolRegistry()
    registry.add("stuck", hang)
    registry.add("quick", answer)
    collector = StatsCollector(Path(run_dir) / "tool_stats")
    server = build_gateway(gateway_file({"resource_type": "rag", "tool_groups": ["stuck", "quick"]}),
                           KnowledgeBase([Passage("p", "t", "text")]), collector, registry=registry)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        asyncio.run(serve(server, bind_socket("127.0.0.1", 0), ready_file=Path(ready_file)))
    finally:
        collector.close()


async def sessions_then_sigterm(proc: subprocess.Popen[bytes], url: str) -> tuple[bool, int]:
    """Open the sessions, answer one call on each, hang a few more, SIGTERM: (whether the process exited within
    `STOP_BOUND_S`, calls answered)."""
    sessions = [McpSession(url, name=f"client-{i}", reconnect_timeout_s=1.0) for i in range(SESSIONS)]
    clients = [await s.open(60) for s in sessions]
    results = await asyncio.gather(*(c.call_tool("answer", {"query": f"q{i}"}) for i, c in enumerate(clients)))
    hung = [asyncio.create_task(c.call_tool("hang", {"query": "x"})) for c in clients[:HUNG]]
    await asyncio.sleep(1.0)  # the hung calls reach their threads
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(proc.wait, STOP_BOUND_S)  # the event: the process exits; the bound: how long we wait
        exited = True
    except subprocess.TimeoutExpired:
        exited = False
    for task in hung:
        task.cancel()
    await asyncio.gather(*hung, return_exceptions=True)
    await asyncio.wait_for(asyncio.gather(*(s.close() for s in sessions), return_exceptions=True), 30)
    return exited, sum(not r.is_error for r in results)


def test_sigterm_stops_the_gateway_with_open_sessions_and_hung_calls(tmp_path):
    ready = tmp_path / "url"
    code = f"from tests.gateway.test_stop import serve_hanging_gateway; serve_hanging_gateway({str(tmp_path)!r}, {str(ready)!r})"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        exited, answered = asyncio.run(sessions_then_sigterm(proc, ready.read_text().strip()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert exited, f"still running {STOP_BOUND_S:.0f} s after SIGTERM"
    assert proc.returncode == 0  # it ended itself (SIGTERM's handler), not by the kill above
    assert answered == SESSIONS
    ledger = [json.loads(line) for line in (tmp_path / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    quick = [r for r in ledger if r["tool_name"] == "answer"]
    assert len(quick) == SESSIONS and all(r["outcome"] == "ok" for r in quick)
