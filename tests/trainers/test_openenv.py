"""`rollout env`: an experiment served as an OpenEnv environment.

In this process, against a real gateway on loopback: the wire shapes of every route and message, episodes of both
action styles, the error paths, the token and the loopback checks (Starlette's TestClient). Then the command itself
on the demo knowledge base, driven by openenv-core 0.3.0's own clients in their venv (`.venvs/openenv`): a whole
episode, four at once over WebSockets, a bad action, and a client without the token.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.paths import PROJECT_ROOT
from rollout.records import Passage, Question
from rollout.retrieval import BM25Retriever
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.openenv.__main__ import main
from rollout.trainers.openenv.episode import ServedExperiment
from rollout.trainers.openenv.routes import create_app
from rollout.trainers.tool_session import GatewayTarget
from rollout.wire import TOKEN_ENV
from tests.conftest import gateway_on_loopback
from tests.demo_runs import SMALL_KB
from tests.trainers.trainer_venvs import trainer_python

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Kelmor", "Kelmor is a city in Dravia."),
    Passage("d2", "Veltrix Holdings", "Veltrix Holdings makes textile looms."),
]
QUESTIONS = [
    Question("q-born", "Where was Arlen Voss born?", ["Kelmor"]),
    Question("q-country", "In which country is Kelmor?", ["Dravia"]),
    Question("q-looms", "Who makes textile looms?", ["Veltrix Holdings", "Veltrix"]),
]
SPARSE = GATEWAYS_DIR / "rag_sparse_only.json"
BASE = "http://127.0.0.1:8001"
WS = "ws://127.0.0.1:8001/ws"
"""Where the TestClient addresses the app: a loopback Host, as the checks want."""
SEARCH = "query_knowledge_base_sparse"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[ServedExperiment, Path]]:
    """search_r1 on the three questions, max 3 turns, tools from a real gateway; and the gateway's ledger."""
    root = tmp_path_factory.mktemp("openenv")
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(q.to_json()) + "\n" for q in QUESTIONS), encoding="utf-8")
    experiment = TrainingExperiment.compose(["mode=sparse", "agent=search_r1", "agent.max_turns=3", "dataset=files",
                                             f"dataset.questions.path={questions}"])
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    with gateway_on_loopback(SPARSE, kb, root) as url:
        yield asyncio.run(ServedExperiment.open(experiment, GatewayTarget(url, SPARSE))), root


def ledger(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]


def step(ws, action: dict) -> dict:
    ws.send_json({"type": "step", "data": action})
    return ws.receive_json()


def test_http_routes_answer_in_openenvs_shapes(served):
    client = TestClient(create_app(served[0]), base_url=BASE)
    assert client.get("/health").json() == {"status": "healthy"}
    assert client.get("/metadata").json()["name"] == "rollout sparse"
    schema = client.get("/schema").json()
    assert set(schema) == {"action", "observation", "state"}
    assert set(schema["action"]["discriminator"]["mapping"]) == {"list_tools", "call_tool", "text"}
    assert client.get("/state").json() == {"episode_id": None, "step_count": 0, "question_id": None, "turns": 0,
                                           "max_turns": 3, "done": False, "reward": None}
    reset = client.post("/reset", json={"question_id": "q-looms", "episode_id": "http-1"}).json()
    assert reset["reward"] is None and reset["done"] is False
    start = reset["observation"]["metadata"]
    assert (start["episode_id"], start["question_id"], start["question"], start["max_turns"]) == (
        "http-1", "q-looms", "Who makes textile looms?", 3)
    (opening,) = start["messages"]
    assert opening["role"] == "user" and opening["content"].endswith("Question: Who makes textile looms?\n")
    assert client.post("/reset").json()["observation"]["metadata"]["question_id"] in {q.id for q in QUESTIONS}
    listed = client.post("/step", json={"action": {"type": "list_tools"}}).json()
    assert [t["name"] for t in listed["observation"]["tools"]] == [SEARCH, "submit_answer"]
    assert listed["observation"]["tools"][0]["input_schema"]["required"] == ["query"]
    # no episode lives between HTTP requests, as in OpenEnv's own server
    refused = client.post("/step", json={"action": {"type": "call_tool", "tool_name": SEARCH}})
    assert refused.status_code == 409 and "WebSocket /ws" in refused.json()["error"]
    # bad bodies: one line each, naming the fix
    assert client.post("/reset", content=b"{nope").status_code == 400
    bad_seed = client.post("/reset", json={"seed": -1})
    assert bad_seed.status_code == 422 and bad_seed.json()["error"].startswith("bad reset: seed: Input should be")
    unknown = client.post("/reset", json={"question": "q-born"}).json()["error"]
    assert "question: Extra inputs are not permitted" in unknown and "question_id" in unknown
    missing = client.post("/reset", json={"question_id": "q-nope"})
    assert missing.status_code == 409 and "'q-nope' is not among this experiment's 3 questions" in missing.json()["error"]
    assert client.post("/step", json={"type": "list_tools"}).json() == {"error": 'send {"action": {...}}'}


def test_a_tool_episode_over_the_websocket_is_rewarded_with_the_evaluations_score(served):
    client = TestClient(create_app(served[0]), base_url=BASE)
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "reset", "data": {"seed": 3, "episode_id": "ws-tool", "training_step": 7}})
        reset = ws.receive_json()
        assert reset["type"] == "observation" and reset["data"]["observation"]["metadata"]["question_id"] == "q-born"
        opening = reset["data"]["observation"]["metadata"]["messages"]
        assert [m["role"] for m in opening] == ["user"] and "<search> query </search>" in opening[0]["content"]
        searched = step(ws, {"type": "call_tool", "tool_name": SEARCH, "arguments": {"query": "Arlen Voss born"}})
        observation = searched["data"]["observation"]
        assert (searched["type"], searched["data"]["reward"], searched["data"]["done"]) == ("observation", 0.0, False)
        assert observation["tool_name"] == SEARCH and observation["error"] is None
        assert observation["result"]["data"]["results"][0]["id"] == "d0"
        assert observation["result"]["content"][0]["text"].startswith("{")  # the text the tool sent with its data
        answered = step(ws, {"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": "the Kelmor"}})
        assert (answered["data"]["reward"], answered["data"]["done"]) == (1.0, True)
        assert answered["data"]["observation"]["result"]["data"] == {"answer": "the Kelmor", "reward": 1.0}
        ws.send_json({"type": "state"})
        assert ws.receive_json() == {"type": "state", "data": {
            "episode_id": "ws-tool", "step_count": 2, "question_id": "q-born", "turns": 2, "max_turns": 3,
            "done": True, "reward": 1.0}}
        after = step(ws, {"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": "Kelmor"}})
        assert after == {"type": "error", "data": {
            "message": "the episode has ended (reward 1.0): send reset for the next question", "code": "EXECUTION_ERROR"}}
        ws.send_json({"type": "close"})
    calls = [c for c in ledger(served[1]) if c["task_id"] == "ws-tool"]
    assert [(c["tool_name"], c["traffic"], c["step"]) for c in calls] == [(SEARCH, "train", 7)]


def test_a_text_episode_reads_the_protocol_as_the_evaluated_agent_does(served):
    client = TestClient(create_app(served[0]), base_url=BASE)
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "reset", "data": {"question_id": "q-country"}})
        ws.receive_json()
        searched = step(ws, {"type": "text", "text": "<think>where</think><search> Kelmor city", "stopped": True})
        turn = searched["data"]["observation"]
        assert (turn["kind"], turn["text"]) == ("search", "<think>where</think><search> Kelmor city</search>")
        assert turn["reply"].startswith("\n\n<information>Doc 1(Title: Kelmor) Kelmor is a city in Dravia.")
        assert turn["tool_call"] == {"name": SEARCH, "arguments": {"query": "Kelmor city", "top_k": 3}, "ok": True}
        mixed = step(ws, {"type": "call_tool", "tool_name": SEARCH, "arguments": {"query": "x"}})
        assert mixed["type"] == "error" and "does not mix text turns with call_tool" in mixed["data"]["message"]
        invalid = step(ws, {"type": "text", "text": "I think it is Dravia."})
        assert invalid["data"]["observation"]["kind"] == "invalid" and not invalid["data"]["done"]
        assert "My previous action is invalid" in invalid["data"]["observation"]["reply"]
        answered = step(ws, {"type": "text", "text": "<answer> Dravia </answer>"})
        assert (answered["data"]["observation"]["answer"], answered["data"]["reward"], answered["data"]["done"]) == (
            "Dravia", 1.0, True)
        # the last turn only answers: a search there is not run, and the episode ends unanswered
        ws.send_json({"type": "reset", "data": {"question_id": "q-country", "episode_id": "ws-out"}})
        ws.receive_json()
        for _ in range(2):
            assert not step(ws, {"type": "call_tool", "tool_name": SEARCH, "arguments": {"query": "Kelmor"}})[
                "data"]["done"]
        last = step(ws, {"type": "call_tool", "tool_name": SEARCH, "arguments": {"query": "Kelmor"}})["data"]
        assert (last["reward"], last["done"], last["observation"]["error"]["error_type"]) == (0.0, True,
                                                                                             "execution_error")
        assert last["observation"]["error"]["message"].startswith("out of turns: turn 3 of 3 is left for the answer")
    assert [c["task_id"] for c in ledger(served[1])].count("ws-out") == 2


def test_bad_actions_get_one_line_and_the_episode_goes_on(served):
    client = TestClient(create_app(served[0]), base_url=BASE)
    with client.websocket_connect(WS) as ws:
        def error(message: dict | str) -> dict:
            ws.send_text(message if isinstance(message, str) else json.dumps(message))
            reply = ws.receive_json()
            assert reply["type"] == "error", reply
            return reply["data"]

        assert error("{not json")["code"] == "INVALID_JSON"
        ws.send_bytes(json.dumps({"type": "state"}).encode())
        assert ws.receive_json()["type"] == "state"
        assert error({"type": "jump"}) == {"message": "unknown message type 'jump': send {\"type\": \"reset\" | "
                                                      "\"step\" | \"state\" | \"close\", \"data\": {...}}",
                                           "code": "UNKNOWN_TYPE"}
        before = error({"type": "step", "data": {"type": "call_tool", "tool_name": SEARCH}})
        assert before == {"message": "no episode: send reset first (it picks the question)", "code": "EXECUTION_ERROR"}
        ws.send_json({"type": "reset", "data": {"question_id": "q-looms"}})
        ws.receive_json()
        malformed = error({"type": "step", "data": {"type": "call_tool", "arguments": {}}})
        assert malformed["code"] == "VALIDATION_ERROR"
        assert malformed["message"].startswith("bad action: call_tool.tool_name: Field required; actions are")
        assert error({"type": "step", "data": {"type": "dance"}})["message"].startswith(
            "bad action: Input tag 'dance' found using 'type' does not match any of the expected tags")
        unknown = step(ws, {"type": "call_tool", "tool_name": "web_search", "arguments": {"q": "x"}})["data"]
        assert unknown["observation"]["error"] == {
            "error_type": "tool_not_found",
            "message": f"unknown tool 'web_search': this environment offers {SEARCH}, submit_answer"}
        bad_arguments = step(ws, {"type": "call_tool", "tool_name": SEARCH, "arguments": {"query": "looms",
                                                                                         "top_k": "many"}})["data"]
        assert bad_arguments["observation"]["error"]["error_type"] == "invalid_args" and not bad_arguments["done"]
        assert "top_k" in bad_arguments["observation"]["error"]["message"]
        # the third turn: an answer without its argument ends the episode unanswered
        no_answer = step(ws, {"type": "call_tool", "tool_name": "submit_answer", "arguments": {"text": "Veltrix"}})
        assert (no_answer["data"]["done"], no_answer["data"]["reward"]) == (True, 0.0)
        assert no_answer["data"]["observation"]["error"]["message"] == (
            'submit_answer takes {"answer": TEXT}, got {"text": "Veltrix"}; that was the last of 3 turns: the '
            "episode ended unanswered")
        ws.send_json({"type": "reset", "data": {"question_id": "q-looms"}})
        ws.receive_json()
        assert step(ws, {"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": "Veltrix"}})[
            "data"]["reward"] == 1.0


def test_the_token_and_the_loopback_checks_guard_every_route(served):
    client = TestClient(create_app(served[0], token="s3cret"), base_url=BASE)
    refused = client.get("/health")
    assert refused.status_code == 401 and refused.json()["error"].startswith("missing bearer token")
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(WS):
        pass
    assert denied.value.status_code == 401
    bearer = {"Authorization": "Bearer s3cret"}
    assert client.get("/health", headers=bearer).status_code == 200
    assert client.get("/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with client.websocket_connect(WS, headers=bearer) as ws:
        ws.send_json({"type": "state"})
        assert ws.receive_json()["type"] == "state"
    rebound = client.get("/health", headers={**bearer, "Host": "attacker.example:8001"})
    assert rebound.status_code == 421 and "'attacker.example:8001'" in rebound.json()["error"]
    foreign = client.get("/health", headers={**bearer, "Origin": "http://attacker.example"})
    assert foreign.status_code == 403 and "loopback name" in foreign.json()["error"]
    with pytest.raises(WebSocketDenialResponse) as cross_site, \
            client.websocket_connect(WS, headers={**bearer, "Origin": "http://attacker.example"}):
        pass
    assert cross_site.value.status_code == 403
    # bound beyond loopback, a server checks no Host (its clients name it as they reach it)
    open_app = TestClient(create_app(served[0], host="0.0.0.0"), base_url="http://10.1.2.3:8001")
    assert open_app.get("/health").status_code == 200


def test_an_experiment_without_a_tag_protocol_takes_tool_actions_only(served, tmp_path, capsys):
    (tmp_path / "q.jsonl").write_text(json.dumps(QUESTIONS[0].to_json()) + "\n")
    experiment = TrainingExperiment.compose(["mode=sparse", "dataset=files",
                                             f"dataset.questions.path={tmp_path / 'q.jsonl'}"])
    target = served[0].target
    plain = asyncio.run(ServedExperiment.open(experiment, target))
    client = TestClient(create_app(plain), base_url=BASE)
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "reset", "data": {}})
        opening = ws.receive_json()["data"]["observation"]["metadata"]["messages"]
        assert [m["role"] for m in opening] == ["system", "user"] and opening[1]["content"] == QUESTIONS[0].question
        refused = step(ws, {"type": "text", "text": "<answer>Kelmor</answer>"})["data"]["message"]
        assert refused.startswith("text actions need an agent that speaks a tag protocol: agent")
        assert "agent=search_r1" in refused
    with pytest.raises(ConfigError, match="reward metric 'bleu'"):
        asyncio.run(ServedExperiment.open(experiment, target, metric="bleu"))
    assert main(["mode=nonexistent", "--port", "0"]) == 2
    assert "Could not find 'mode/nonexistent'" in capsys.readouterr().err


# --- the command, driven by openenv-core's own clients ----------------------------------------------------------

CLIENT = r'''
import asyncio, json, sys
from openenv.core import GenericEnvClient
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient
from rollout.trainers.openenv.client import BearerToken

url, golden = json.loads(sys.stdin.readline())  # once the environment serves
out = {}


class Tools(BearerToken, MCPToolClient): ...
class Text(BearerToken, GenericEnvClient): ...


async def tool_episode():
    async with Tools(base_url=url) as env:
        start = (await env.reset(question_id="q-000002", episode_id="mcp-0")).observation.metadata
        tools = [t.name for t in await env.list_tools()]
        found = await env.call_tool(tools[0], query=start["question"])
        try:
            await env.call_tool("web_search", q="x")
        except RuntimeError as e:
            bad = str(e)
        answered = await env.step(CallToolAction(tool_name="submit_answer", arguments={"answer": golden["q-000002"]}))
        out["tool"] = {"question": start["question"], "tools": tools, "hits": len(found["results"]), "bad": bad,
                       "reward": answered.reward, "done": answered.done, "state": (await env.state()).model_dump()}


async def text_episode(i):
    async with Text(base_url=url) as env:
        start = (await env.reset(seed=i, episode_id=f"text-{i}")).observation["metadata"]
        searched = await env.step({"type": "text", "text": f"<search> {start['question']} </search>"})
        answered = await env.step({"type": "text", "text": f"<answer> {golden[start['question_id']]} </answer>"})
        return {"id": start["question_id"], "reply": searched.observation["reply"][:15], "reward": answered.reward,
                "done": answered.done}


async def bad_action():
    async with Text(base_url=url) as env:
        await env.reset(question_id="q-000001")
        try:
            await env.step({"type": "call_tool", "tool_name": "submit_answer", "args": {}})
        except RuntimeError as e:
            out["bad"] = str(e)
        out["bad_then"] = (await env.step({"type": "call_tool", "tool_name": "submit_answer",
                                           "arguments": {"answer": golden["q-000001"]}})).reward


async def without_token():
    try:
        async with GenericEnvClient(base_url=url) as env:
            await env.reset()
    except ConnectionError as e:
        out["refused"] = str(e)


async def run():
    await tool_episode()
    out["text"] = await asyncio.gather(*(text_episode(i) for i in range(4)))
    await bad_action()
    await without_token()
    print(json.dumps(out))

asyncio.run(run())
'''


def test_openenv_clients_play_episodes_on_rollout_env(cache_dir, tmp_path):
    """`rollout env` on the small demo knowledge base with a token, its own gateway started; the client script
    starts beside it (its imports take seconds) and is sent the URL and the golden answers once it serves."""
    python = trainer_python("openenv")
    ready, out = tmp_path / "ready", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), TOKEN_ENV: "openenv-s3cret"}
    overrides = ["mode=sparse", "agent=search_r1", *SMALL_KB, "dataset.limit=20", f"cache_dir={cache_dir}"]
    argv = [sys.executable, "-m", "rollout.cli", "env", *overrides, "--port", "0", "--ready-file", str(ready),
            "--output-dir", str(out)]
    log = tmp_path / "server.log"  # a file, not a pipe: the server and its gateway log there while it serves
    with log.open("w") as server_log, subprocess.Popen(argv, env=env, stderr=server_log) as server, \
            subprocess.Popen([str(python), "-c", CLIENT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path) as client:
        try:
            deadline = time.monotonic() + 600
            while not ready.exists():
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "rollout env did not serve within 600 s"
                time.sleep(0.2)
            golden = {q.id: q.golden_answers[0] for q in TrainingExperiment.compose(overrides).questions()}
            stdout, stderr = client.communicate(json.dumps([ready.read_text().strip(), golden]) + "\n", timeout=600)
            assert client.returncode == 0, stderr
        finally:
            client.kill()
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0, log.read_text()
    seen = json.loads(stdout)
    tool = seen["tool"]
    assert tool["tools"] == [SEARCH, "submit_answer"] and tool["hits"] > 0
    assert (tool["reward"], tool["done"], tool["state"]["episode_id"]) == (1.0, True, "mcp-0")
    assert tool["bad"] == ("Tool 'web_search' failed: unknown tool 'web_search': this environment offers "
                           f"{SEARCH}, submit_answer (type: tool_not_found)")
    assert [t["id"] for t in seen["text"]] == ["q-000000", "q-000001", "q-000002", "q-000003"]
    assert all(t["reward"] == 1.0 and t["done"] and t["reply"] == "\n\n<information>" for t in seen["text"])
    assert seen["bad"].startswith("Server error: bad action: call_tool.args: Extra inputs are not permitted")
    assert seen["bad"].endswith("(code: VALIDATION_ERROR)") and seen["bad_then"] == 1.0
    assert "HTTP 401" in seen["refused"]
    # every search in the gateway's ledger: one task per episode, each marked as training traffic
    calls = [json.loads(x) for x in (out / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    by_task = {c["task_id"]: c["traffic"] for c in calls}
    assert by_task == {"mcp-0": "train", **{f"text-{i}": "train" for i in range(4)}}
