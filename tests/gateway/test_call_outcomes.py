"""Calls that end in an exception still reach the ledger, once each: `cancelled` when the client abandons the call
(its timeout) or the gateway stops under it, `protocol_error` when the gateway fails handling it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from mcp.client.client import Client
from mcp.client.sse import sse_client

from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.server import build_gateway, make_uvicorn
from rollout.gateway.stats import StatsCollector
from rollout.records import Passage
from rollout.run_folder import CALLS_FILE, STATS_DIR
from rollout.wire import META_CALL_ID
from tests.gateway.loopback import gateway_file, serving

LEDGER_BOUND_S = 10.0
"""How long a test waits for a line to reach the ledger: only so that a missing line fails instead of hanging."""


@contextlib.contextmanager
def waiting_gateway(run_dir: Path, transport: str = "streamable-http", stop_grace_s: float = 5.0,
                    reached: threading.Event | None = None) -> Iterator[str]:
    """A gateway whose one tool `wait` sleeps on the event loop (so a cancellation reaches it), setting `reached`
    when it starts; yield its base URL."""

    async def wait(seconds: float) -> str:
        """Sleep, then answer."""
        if reached is not None:
            reached.set()
        await asyncio.sleep(seconds)
        return "done"

    registry = ToolRegistry()
    registry.add("waiting", wait)
    collector = StatsCollector(run_dir / STATS_DIR)
    server = build_gateway(gateway_file({"resource_type": "rag", "tool_groups": ["waiting"]}),
                           KnowledgeBase([Passage("p", "t", "text")]), collector, registry=registry)
    try:
        with serving(make_uvicorn(server, transport=transport, stop_grace_s=stop_grace_s)) as base:
            yield base
    finally:
        collector.close()


def ledger(run_dir: Path) -> list[dict]:
    path = run_dir / STATS_DIR / CALLS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lines_of(run_dir: Path, call_id: str, *, wait_s: float = 0.0) -> list[dict]:
    """The ledger's lines of `call_id`, waiting up to `wait_s` for the first."""
    deadline = time.monotonic() + wait_s
    while not (found := [r for r in ledger(run_dir) if r["call_id"] == call_id]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def test_a_call_the_client_gives_up_on_is_recorded_once_as_cancelled(tmp_path):
    # Over SSE the client's timeout sends notifications/cancelled, which cancels the call on the gateway.
    with waiting_gateway(tmp_path, transport="sse") as base:
        async def give_up() -> tuple[BaseException | None, bool]:
            """(what the abandoned call raised, whether the next call on the session was answered)."""
            async with Client(sse_client(f"{base}/sse")) as client:
                raised = None
                try:
                    await client.call_tool("wait", {"seconds": 600}, read_timeout_seconds=0.3,
                                           meta={META_CALL_ID: "c-abandoned"})
                except Exception as e:  # the client's timeout
                    raised = e
                answered = await client.call_tool("wait", {"seconds": 0}, meta={META_CALL_ID: "c-next"})
            return raised, not answered.is_error

        raised, next_answered = asyncio.run(give_up())
        assert raised is not None and next_answered, "the call did not time out on the client"
        [line] = lines_of(tmp_path, "c-abandoned", wait_s=LEDGER_BOUND_S)  # recorded while the gateway still runs
    assert (line["tool_name"], line["ok"], line["outcome"]) == ("wait", False, "cancelled")
    assert line["error"].startswith("CancelledError")
    # Once, and not again when the gateway stops; the session's next call is its own line.
    assert sorted(r["call_id"] for r in ledger(tmp_path)) == ["c-abandoned", "c-next"]


def test_a_call_in_flight_when_the_gateway_stops_is_recorded_once_as_cancelled(tmp_path):
    # Ctrl-C on a gateway: past its stop grace, the calls still running are cancelled, and each is recorded.
    reached = threading.Event()

    async def call_then_stop() -> None:
        with contextlib.ExitStack() as gateway:
            base = gateway.enter_context(waiting_gateway(tmp_path, stop_grace_s=0.2, reached=reached))
            async with Client(f"{base}/mcp") as client:
                pending = asyncio.create_task(client.call_tool("wait", {"seconds": 600},
                                                               meta={META_CALL_ID: "c-stopped"}))
                assert await asyncio.to_thread(reached.wait, LEDGER_BOUND_S), "the call never reached its tool"
                assert lines_of(tmp_path, "c-stopped") == []  # still running
                await asyncio.to_thread(gateway.close)  # the gateway stops under the call
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    asyncio.run(asyncio.wait_for(call_then_stop(), 3 * LEDGER_BOUND_S))
    [line] = lines_of(tmp_path, "c-stopped")
    assert (line["tool_name"], line["ok"], line["outcome"]) == ("wait", False, "cancelled")


def test_a_malformed_call_is_recorded_once_as_a_protocol_error(tmp_path):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    bad_call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "wait", "arguments": "not an object", "_meta": {META_CALL_ID: "c-malformed"}}}
    with waiting_gateway(tmp_path) as base, httpx.Client(base_url=base, timeout=10,
                                                         headers={"Accept": "application/json, text/event-stream"}) as http:
        opened = http.post("/mcp", json=initialize)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        answer = http.post("/mcp", json=bad_call, headers=session).json()
    assert answer["error"]["code"] == -32602  # INVALID_PARAMS, as the SDK answers it
    [line] = lines_of(tmp_path, "c-malformed")
    assert (line["tool_name"], line["ok"], line["outcome"]) == ("wait", False, "protocol_error")
    assert line["error"].startswith("ValidationError")


def test_a_call_is_recorded_as_it_is_answered_with_its_time_in_milliseconds(tmp_path):
    with waiting_gateway(tmp_path) as base:
        async def call() -> bool:
            async with Client(f"{base}/mcp") as client:
                result = await client.call_tool("wait", {"seconds": 0.25}, meta={META_CALL_ID: "c-timed"})
            return result.is_error

        assert not asyncio.run(call())
        [line] = lines_of(tmp_path, "c-timed")  # in the file already, while the gateway still runs
    # The tool slept a quarter of a second: at least 250 ms (a lower bound the sleep guarantees, not a benchmark).
    assert line["outcome"] == "ok" and line["duration_ms"] >= 250
