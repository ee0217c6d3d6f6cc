"""Each tool group's sync tools run on threads of their own: a hung group cannot starve another."""

from __future__ import annotations

import asyncio
import threading

import pytest
from mcp.client.client import Client

from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.registry import ToolRegistry
from rollout.gateway.server import build_gateway
from rollout.records import Passage
from rollout.wire import META_OUTCOME
from tests.gateway.loopback import gateway_file

RELEASE = threading.Event()
"""Set at the end of the test, so the threads of hung calls finish."""
RUNNING = {"now": 0, "most": 0}
_LOCK = threading.Lock()


def hang(query: str) -> str:
    """Blocks its worker thread until the test releases it."""
    with _LOCK:
        RUNNING["now"] += 1
        RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    RELEASE.wait(30)
    with _LOCK:
        RUNNING["now"] -= 1
    return "late"


def answer(query: str) -> str:
    """Answers at once."""
    return f"echo {query}"


def registry() -> ToolRegistry:
    r = ToolRegistry()
    r.add("stuck", hang)
    r.add("quick", answer)
    return r


def served(threads: int, timeout_s: float | None):
    kb = KnowledgeBase([Passage("p", "t", "text")])
    module = {"resource_type": "rag", "tool_groups": ["stuck", "quick"]}
    return build_gateway(gateway_file(module), kb, tool_timeout_s=timeout_s, registry=registry(),
                         threads_per_group=threads)


async def test_a_hung_group_leaves_the_others_their_threads_and_gives_its_slots_back():
    server = served(threads=2, timeout_s=3.0)
    try:
        async with Client(server) as client:
            # Four calls into a group of two slots: two hang on threads, two wait for a slot; all time out.
            stuck = [asyncio.ensure_future(client.call_tool("hang", {"query": str(i)})) for i in range(4)]
            quick = await asyncio.wait_for(client.call_tool("answer", {"query": "x"}), 5)
            assert not quick.is_error and "echo x" in quick.content[0].text
            # Before any call times out, only the group's two threads run: the other two wait for a slot.
            # (Once the first two time out their threads run on unseen, and the waiting two may start.)
            for _ in range(100):
                if RUNNING["now"] >= 2:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # room for a third call to start, were the group not capped
            running_before_timeouts = RUNNING["most"]
            results = await asyncio.wait_for(asyncio.gather(*stuck), 10)
            assert all(r.is_error and (r.meta or {}).get(META_OUTCOME) == "timeout" for r in results)
            assert running_before_timeouts == 2
            # The timed-out calls gave their slots back although their threads still run: the group answers
            # again once a call can finish.
            RELEASE.set()
            again = await asyncio.wait_for(client.call_tool("hang", {"query": "after"}), 10)
            assert not again.is_error
    finally:
        RELEASE.set()


def test_a_group_needs_one_thread_at_least():
    with pytest.raises(ConfigError, match="at least 1"):
        served(threads=0, timeout_s=None)
