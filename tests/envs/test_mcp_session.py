"""McpSession against a real MCP server on loopback: first open, generations, refusal, down, close."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rollout.errors import GatewayError
from rollout.listen import bind_socket
from rollout.mcp_client.session import McpSession
from tests.gateway.loopback import upstream_on_loopback, upstream_server

UNREACHABLE = "http://127.0.0.1:9/mcp"
HANG_GUARD_S = 30.0
"""Upper bound that only keeps a broken session from hanging the suite; not a performance claim."""


async def until_up(session: McpSession) -> int:
    """Wait for the session to be open again; its generation."""
    async with asyncio.timeout(HANG_GUARD_S):
        while (current := session.current())[0] is None:
            await asyncio.sleep(0.05)
    return current[1]


async def test_a_first_open_failure_is_raised_to_the_opener_and_nothing_is_retried():
    session = McpSession(UNREACHABLE)
    with pytest.raises(Exception) as raised:
        await session.open()
    assert not isinstance(raised.value, BaseExceptionGroup)  # the root cause, not the SDK's task-group wrapping
    assert session.error is raised.value
    assert session.state == "new" and not session.started
    await session.close()  # nothing to close: returns at once


async def test_a_broken_session_is_reopened_once_however_often_it_is_reported():
    with upstream_on_loopback() as url:
        session = McpSession(url, name="t")
        await session.open()
        try:
            client, first = session.current()
            assert client is not None and (await client.call_tool("add", {"a": 1, "b": 2})).structured_content
            session.report_broken(first, ConnectionError("call found it gone"))
            session.report_broken(first, ConnectionError("a second call found it gone"))
            assert session.state == "reconnecting" and session.current() == (None, 0)
            client, second, why = await session.acquire(first, HANG_GUARD_S)
            session.report_broken(first, ConnectionError("a late report about the old session"))
            state, now = session.state, session.current()[1]
            added = await client.call_tool("add", {"a": 2, "b": 40}) if client is not None else None
        finally:
            await session.close()
    assert why == "" and second == first + 1
    assert state == "up" and now == second  # the stale report changed nothing
    assert session.reconnects == 1
    assert added is not None and added.structured_content == {"result": 42}
    assert session.state == "closed" and not session.started


async def test_on_open_refusing_a_reopened_session_is_final():
    opened: list[bool] = []

    async def check(client, reopened: bool) -> None:
        opened.append(reopened)
        assert [t.name for t in (await client.list_tools()).tools] == ["echo", "add", "slow"]
        if reopened:
            raise GatewayError("the server came back with other tools")

    with upstream_on_loopback() as url:
        session = McpSession(url, on_open=check)
        await session.open()
        try:
            _, generation = session.current()
            session.report_broken(generation, ConnectionError("gone"))
            client, _, why = await session.acquire(generation, HANG_GUARD_S)
            again = await session.acquire(0, HANG_GUARD_S)
            state = session.state
        finally:
            await session.close()
    assert opened == [False, True]
    assert client is None and why == "the server came back with other tools"
    assert again == (None, 0, why)
    assert state == "failed" and session.reconnects == 0


async def test_a_refusal_on_the_first_open_is_raised_as_it_is():
    async def refuse(client, reopened: bool) -> None:
        raise GatewayError("not this server")

    with upstream_on_loopback() as url:
        session = McpSession(url, on_open=refuse)
        with pytest.raises(GatewayError, match="^not this server$"):
            await session.open()
    assert not session.started


async def test_a_session_down_past_its_budget_fails_calls_at_once_and_comes_back_with_the_server():
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    with contextlib.ExitStack() as server:
        url = server.enter_context(upstream_on_loopback(sock))
        session = McpSession(url, name="t", peer=f"the test server at {url}", reconnect_timeout_s=1.0,
                             backoff_cap_s=0.2)
        await session.open()
        try:
            _, first = session.current()
            server.close()
            session.report_broken(first, ConnectionError("gone"))
            client, _, why = await session.acquire(first, HANG_GUARD_S)  # returns once the budget is spent
            state = session.state
            immediately = await session.acquire(first, HANG_GUARD_S)  # down: no waiting
            server.enter_context(upstream_on_loopback(bind_socket("127.0.0.1", port)))
            second = await until_up(session)
            back = session.state
        finally:
            await session.close()
    assert client is None and state == "down"
    assert why.startswith(f"the test server at {url} is down: no MCP session for 1 s (last error: "), why
    assert "still retrying" in why and immediately == (None, 0, why)
    assert back == "up" and second == first + 1 and session.reconnects == 1


async def test_close_while_reconnecting_ends_waiting_callers():
    with contextlib.ExitStack() as server:
        url = server.enter_context(upstream_on_loopback())
        session = McpSession(url, label="environment", reconnect_timeout_s=120)
        await session.open()
        _, generation = session.current()
        server.close()
        session.report_broken(generation, ConnectionError("gone"))
        waiting = asyncio.create_task(session.acquire(generation, 120))
        await asyncio.sleep(0.2)
        still_waiting = not waiting.done()
        await asyncio.wait_for(session.close(), HANG_GUARD_S)
        result = await asyncio.wait_for(waiting, HANG_GUARD_S)
    assert still_waiting
    assert result == (None, 0, "environment is closed")
    assert session.state == "closed"


async def test_an_in_process_server_is_a_target_too():
    session = McpSession(upstream_server(), name="http-proxy")
    client = await session.open(30.0)
    try:
        echoed = await client.call_tool("echo", {"text": "hi"})
    finally:
        await session.close()
    assert echoed.structured_content == {"result": "hi"}
    assert session.url.startswith("the in-process server")
