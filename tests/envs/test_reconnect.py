"""HttpMCPEnv across a gateway restart: a real gateway process, SIGKILLed and relaunched on the same port."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs import HttpMCPRagEnv
from rollout.gateway_file import GATEWAYS_DIR
from rollout.report import load_calls
from rollout.run.gateway_process import GatewayProcess
from tests.gateway.loopback import PASSAGES, kill

SPARSE_FILE = GATEWAYS_DIR / "rag_sparse_only.json"
NO_TOOL_FILE = GATEWAYS_DIR / "rag_no_tool.json"
TOOL = "query_knowledge_base_sparse"
CLOSE_BOUND_S = 10.0
"""Upper bound that only keeps a broken close() from hanging the suite; not a performance claim."""


def gateway_args(run_dir: Path, config: Path = SPARSE_FILE, transport: str = "streamable-http") -> list[str]:
    corpus = run_dir / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "contents": f"{p.title}\n{p.text}"}) + "\n" for p in PASSAGES))
    return ["--config", str(config), "--corpus", str(corpus), "--cache-dir", str(run_dir / "cache"),
            "--output-dir", str(run_dir), "--transport", transport]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[tuple[GatewayProcess, Path]]:
    """One gateway process for the module; each test that kills it leaves it running again."""
    run_dir = tmp_path_factory.mktemp("reconnect")
    with GatewayProcess(gateway_args(run_dir), ready_timeout_s=120) as gw:
        gw.wait_ready()
        yield gw, run_dir


@pytest.fixture
def gw(gateway) -> Iterator[GatewayProcess]:
    process, _ = gateway
    if not process.is_alive():
        process.restart()
    yield process
    if not process.is_alive():
        process.restart()


async def test_calls_made_while_the_gateway_is_down_wait_and_share_one_reconnection(gw, gateway, caplog):
    _, run_dir = gateway
    caplog.set_level(logging.WARNING, logger="envs.http_mcp_env")
    url = gw.wait_ready()
    async with HttpMCPRagEnv(url, SPARSE_FILE, worker_id="w-down") as env:
        warm = env.for_task("warm")
        assert (await warm.call_tool(TOOL, {"query": "Voss"})).ok
        kill(gw)
        tasks = [env.for_task(f"t{i}") for i in range(16)]
        pending = [asyncio.create_task(t.call_tool(TOOL, {"query": "Kelmor"})) for t in tasks]
        await asyncio.sleep(0.5)
        waiting = not any(p.done() for p in pending)
        assert await asyncio.to_thread(gw.restart) == url
        results = await asyncio.gather(*pending)
        reconnects = env.reconnects
    assert waiting, "calls to a dead gateway returned instead of waiting for it"
    assert [r.ok for r in results] == [True] * 16, [r.text for r in results if not r.ok]
    assert reconnects == 1
    assert caplog.text.count("lost its MCP session") == 1  # one break; closing the env is not one
    sent = [c.call_id for t in tasks for c in t.calls]
    ledger = load_calls(run_dir)["call_id"].tolist()
    assert sorted(c for c in ledger if c in set(sent)) == sorted(sent)  # each call answered once, by the new gateway


async def test_a_gateway_restarted_between_calls_answers_the_next_call(gw):
    # Sessionless protocol versions make the restart invisible; with a session id the new gateway does not
    # know, the env reopens the session once.
    url = gw.wait_ready()
    async with HttpMCPRagEnv(url, SPARSE_FILE) as env:
        task = env.for_task("t")
        assert (await task.call_tool(TOOL, {"query": "Voss"})).ok
        kill(gw)
        await asyncio.to_thread(gw.restart)  # before any call could notice the gateway was gone
        result = await task.call_tool(TOOL, {"query": "Voss"})
        reconnects = env.reconnects
    assert result.ok, result.text
    assert reconnects in (0, 1)


async def test_calls_fail_with_an_error_result_when_the_gateway_stays_down(gw):
    url = gw.wait_ready()
    async with HttpMCPRagEnv(url, SPARSE_FILE, reconnect_timeout_s=1.0) as env:
        task = env.for_task("t")
        assert (await task.call_tool(TOOL, {"query": "Voss"})).ok
        kill(gw)
        first = await task.call_tool(TOOL, {"query": "Voss"})
        second = await task.call_tool(TOOL, {"query": "Kelmor"})
        await asyncio.wait_for(env.close(), CLOSE_BOUND_S)  # raises TimeoutError past the bound
    for result, record in zip([first, second], task.calls[1:], strict=True):
        assert not result.ok
        assert record.outcome == "transport_error"
        assert f"the gateway at {url} is down" in result.text, result.text
    assert env.reconnects == 0


async def test_close_while_reconnecting_returns_promptly_and_ends_waiting_calls(gw):
    url = gw.wait_ready()
    env = HttpMCPRagEnv(url, SPARSE_FILE, reconnect_timeout_s=120)
    await env.start()
    task = env.for_task("t")
    assert (await task.call_tool(TOOL, {"query": "Voss"})).ok
    kill(gw)
    pending = asyncio.create_task(task.call_tool(TOOL, {"query": "Voss"}))
    await asyncio.sleep(0.5)
    assert not pending.done()  # waiting for the gateway to come back
    await asyncio.wait_for(env.close(), CLOSE_BOUND_S)
    result = await asyncio.wait_for(pending, CLOSE_BOUND_S)
    assert not result.ok and task.calls[-1].outcome == "transport_error"
    assert "closed" in result.text, result.text


async def test_calls_over_sse_wait_for_the_restarted_gateway(tmp_path, caplog):
    # Over SSE the broken event stream ends the session by itself, before any call notices.
    caplog.set_level(logging.DEBUG, logger="mcp.client")
    with GatewayProcess(gateway_args(tmp_path, transport="sse"), ready_timeout_s=120) as gw:
        url = gw.wait_ready()
        async with HttpMCPRagEnv(url, SPARSE_FILE) as env:
            tasks = [env.for_task(f"t{i}") for i in range(4)]
            assert (await tasks[0].call_tool(TOOL, {"query": "Voss"})).ok
            kill(gw)
            pending = [asyncio.create_task(t.call_tool(TOOL, {"query": "Kelmor"})) for t in tasks]
            await asyncio.sleep(0.5)
            waiting = not any(p.done() for p in pending)
            await asyncio.to_thread(gw.restart)
            results = await asyncio.gather(*pending)
            reconnects = env.reconnects
    assert waiting
    assert [r.ok for r in results] == [True] * 4, [r.text for r in results if not r.ok]
    assert reconnects == 1
    # The SDK reports the broken stream, in one line each: reconnecting is handled, no traceback is due.
    sdk = [r for r in caplog.records if r.name.startswith("mcp.client")]
    assert any(r.levelno == logging.WARNING and "Error in sse_reader" in r.getMessage() for r in sdk)
    assert not [r.getMessage() for r in sdk if r.exc_info or r.levelno > logging.WARNING]


async def test_a_gateway_back_with_other_tools_fails_calls_and_says_why(tmp_path):
    with GatewayProcess(gateway_args(tmp_path), ready_timeout_s=120) as gw:
        url = gw.wait_ready()
        async with HttpMCPRagEnv(url, SPARSE_FILE) as env:
            task = env.for_task("t")
            assert (await task.call_tool(TOOL, {"query": "Voss"})).ok
            kill(gw)
            pending = asyncio.create_task(task.call_tool(TOOL, {"query": "Voss"}))  # finds it down: reconnects
            await asyncio.sleep(0.5)
            gw.args = gateway_args(tmp_path, NO_TOOL_FILE)
            await asyncio.to_thread(gw.restart)
            result = await asyncio.wait_for(pending, 60)
            again = await asyncio.wait_for(task.call_tool(TOOL, {"query": "Kelmor"}), 60)
    assert not result.ok and "came back with other tools" in result.text, result.text
    assert not again.ok and "came back with other tools" in again.text
    assert env.reconnects == 0
