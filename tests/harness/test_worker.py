"""RolloutWorker outside Ray against a real gateway: what a result says when a wait inside a task runs out."""

from __future__ import annotations

import asyncio

import pytest

from rollout.events import ErrorEvent
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.records import Passage, Question, TaskResult
from rollout.retrieval import BM25Retriever
from rollout.run.worker import EnvSpec, RolloutWorker
from tests.conftest import gateway_on_loopback

PASSAGES = [Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961.")]
GATEWAY = GATEWAYS_DIR / "rag_sparse_only.json"
QUESTION = Question("q1", "Where was Arlen Voss born?", ["Kelmor"])


@pytest.mark.parametrize(
    ("agent", "task_timeout_s", "status", "message"),
    [
        # The agent's own wait runs out long before the task's limit: its error, not a task timeout.
        ({"_target_": "tests.harness.agents.InnerTimeoutAgent"}, 60, "error", "TimeoutError: "),
        # The task's limit itself.
        ({"_target_": "rollout.agents.simulated.SimulatedAgent", "llm_latency_s": 5.0}, 0.3, "timeout",
         "task exceeded its time limit of 0.3 s"),
    ],
)
async def test_only_the_task_deadline_makes_a_timeout(
    tmp_path, agent: dict, task_timeout_s: float, status: str, message: str
) -> None:
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    with gateway_on_loopback(GATEWAY, kb, tmp_path) as url:
        worker = RolloutWorker("w0", EnvSpec(url, str(GATEWAY)), agent, task_timeout_s=task_timeout_s)
        try:
            result = await worker.run_task(QUESTION)
        finally:
            await worker.close()
    last = result.events[-1]
    assert isinstance(last, ErrorEvent) and (result.status, last.kind) == (status, status)
    assert result.error is not None and result.error.startswith(message)


async def test_a_gateway_that_cannot_be_reached_makes_an_infra_error_not_an_error(tmp_path) -> None:
    import socket

    sock = socket.socket()  # bound, never listening: connections are refused at once
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    agent = {"_target_": "rollout.agents.simulated.SimulatedAgent", "llm_latency_s": 0.0}
    worker = RolloutWorker("w0", EnvSpec(url, str(GATEWAY), reconnect_timeout_s=0.5), agent)
    try:
        result = await worker.run_task(QUESTION)
    finally:
        await worker.close()
        sock.close()
    last = result.events[-1]
    assert isinstance(last, ErrorEvent) and (result.status, last.kind) == ("infra_error", "infra_error")
    assert result.error is not None and "could not open an MCP session" in result.error


async def _finished(worker: RolloutWorker, task: asyncio.Task) -> TaskResult:
    """The task's result once it finishes (30 s at most), the worker closed either way."""
    try:
        return await asyncio.wait_for(task, 30)
    finally:
        await worker.close()


async def test_a_worker_whose_gateway_is_restarting_waits_for_it(tmp_path) -> None:
    """An actor's first task may come while the run restarts a dead gateway: it waits, as calls do."""
    import socket

    from rollout.gateway.server import build_gateway, make_uvicorn
    from rollout.gateway_file import load_gateway_file
    from tests.gateway.loopback import serving

    sock = socket.socket()  # bound, not yet listening: connections are refused until the gateway is back
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    agent = {"_target_": "rollout.agents.simulated.SimulatedAgent", "llm_latency_s": 0.0}
    worker = RolloutWorker("w0", EnvSpec(url, str(GATEWAY), reconnect_timeout_s=30), agent)
    task = asyncio.create_task(worker.run_task(QUESTION))
    await asyncio.sleep(1.0)
    assert not task.done()
    sock.listen(16)
    with serving(make_uvicorn(build_gateway(load_gateway_file(GATEWAY), kb)), sock):
        result = await _finished(worker, task)
    assert result.status == "ok", result.error
    assert result.tool_calls and all(c.ok for c in result.tool_calls)


async def test_the_time_limit_starts_with_the_agent_not_while_the_actor_waits_for_its_session(tmp_path) -> None:
    """An actor started before its gateway was ready gets its environment later (`use_env`): its first tasks wait for
    it, and then have their whole time limit."""
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    agent = {"_target_": "rollout.agents.simulated.SimulatedAgent", "llm_latency_s": 0.0}
    with gateway_on_loopback(GATEWAY, kb, tmp_path) as url:
        worker = RolloutWorker("w0", None, agent, task_timeout_s=0.5)
        task = asyncio.create_task(worker.run_task(QUESTION))
        await asyncio.sleep(1.0)  # the wait for the session, past the task's limit
        worker.use_env(EnvSpec(url, str(GATEWAY)))
        result = await _finished(worker, task)
    assert result.status == "ok", result.error
    assert result.tool_calls and all(c.ok for c in result.tool_calls)
