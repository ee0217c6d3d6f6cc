"""Bearer token: required on every route when set; the env, GatewayProcess and the run config carry it."""

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from envs import HttpMCPRagEnv
from rollout.errors import GatewayError
from rollout.gateway_file import GATEWAYS_DIR
from rollout.report import load_calls
from rollout.run.config import compose_run_config
from rollout.run.gateway_process import GatewayProcess
from rollout.wire import TOKEN_ENV, resolve_token
from tests.gateway.loopback import PASSAGES, SPARSE_MODULE, gateway_file, gateway_served, sparse_kb

TOKEN = "s3cret-token"
SPARSE_FILE = GATEWAYS_DIR / "rag_sparse_only.json"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("auth")
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), run_dir, auth_token=TOKEN) as base:
        yield base, run_dir


def _requests(base: str, headers: dict[str, str], run_dir: Path) -> dict[str, httpx.Response]:
    return {
        "mcp": httpx.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=10),
        "healthz": httpx.get(f"{base}/healthz", headers=headers, timeout=10),
        "proxy": httpx.post(f"{base}/proxy/tools/query_knowledge_base_sparse/call", json={"query": "Voss"},
                            headers=headers, timeout=10),
        "runs": httpx.post(f"{base}/runs", json={"run_id": "r1", "output_dir": str(run_dir)}, headers=headers,
                           timeout=10),
    }


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, "wrong bearer token"),
        ({"Authorization": f"Basic {TOKEN}"}, "the Authorization header is not 'Bearer <token>'"),
    ],
)
def test_every_route_answers_401_without_the_right_token(served, headers, reason):
    base, run_dir = served
    for route, r in _requests(base, headers, run_dir).items():
        assert r.status_code == 401, route
        assert r.json()["error"].startswith(reason) and "\n" not in r.json()["error"], route
        assert TOKEN_ENV in r.json()["error"]
        assert r.headers["WWW-Authenticate"].startswith("Bearer")


def test_every_route_answers_with_the_token(served):
    base, run_dir = served
    responses = _requests(base, {"Authorization": f"Bearer {TOKEN}"}, run_dir)
    assert {route: r.status_code for route, r in responses.items()} == {"mcp": 200, "healthz": 200, "proxy": 200,
                                                                        "runs": 200}


@pytest.mark.parametrize("token", [TOKEN[:-1], TOKEN[:1], TOKEN + "x"])
def test_a_token_that_only_shares_a_prefix_with_the_right_one_is_refused(served, token):
    base, _ = served
    r = httpx.get(f"{base}/healthz", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"].startswith("wrong bearer token")


def test_the_scheme_is_read_whatever_its_case(served):
    # RFC 9110: the authentication scheme is case-insensitive.
    base, _ = served
    assert {httpx.get(f"{base}/healthz", headers={"Authorization": f"{scheme} {TOKEN}"}, timeout=10).status_code
            for scheme in ("bearer", "BEARER", "Bearer")} == {200}


@pytest.fixture(scope="module")
def served_sse():
    with gateway_served(gateway_file(SPARSE_MODULE), sparse_kb(), transport="sse", auth_token=TOKEN) as base:
        yield base


def _open_sse(base: str, headers: dict[str, str]) -> httpx.Response:
    """`GET /sse`'s response: a refusal read whole, an event stream closed once its headers are in."""
    with httpx.stream("GET", f"{base}/sse", headers=headers, timeout=10) as r:
        if r.status_code != 200:
            r.read()
        return r


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, "wrong bearer token"),
    ],
)
def test_the_sse_transport_answers_401_without_the_right_token(served_sse, headers, reason):
    # Both of its routes: the event stream and the endpoint its messages are posted to.
    stream = _open_sse(served_sse, headers)
    message = httpx.post(f"{served_sse}/messages/", params={"session_id": "0" * 32}, json=INITIALIZE,
                         headers=headers, timeout=10)
    for route, r in {"sse": stream, "messages": message}.items():
        assert r.status_code == 401, route
        assert r.json()["error"].startswith(reason), route
        assert r.headers["WWW-Authenticate"].startswith("Bearer"), route


def test_the_sse_transport_lets_the_token_through(served_sse):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert _open_sse(served_sse, auth).status_code == 200
    # Past the token, an unknown session is the transport's own answer, not a refusal.
    r = httpx.post(f"{served_sse}/messages/", params={"session_id": "0" * 32}, json=INITIALIZE, headers=auth,
                   timeout=10)
    assert r.status_code == 404


async def test_env_sends_the_token_and_fails_clearly_without_it(served, monkeypatch):
    base, run_dir = served
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    async with HttpMCPRagEnv(f"{base}/mcp", SPARSE_FILE, worker_id="w-auth", auth_token=TOKEN) as env:
        result = await env.for_task("t-auth").call_tool("query_knowledge_base_sparse", {"query": "Voss"})
    assert result.ok
    assert "w-auth" in load_calls(run_dir)["worker_id"].tolist()
    with pytest.raises(GatewayError, match="could not open an MCP session"):
        await HttpMCPRagEnv(f"{base}/mcp", SPARSE_FILE).start()


async def test_env_takes_the_token_from_the_environment(served, monkeypatch):
    base, _ = served
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    async with HttpMCPRagEnv(f"{base}/mcp", SPARSE_FILE) as env:
        assert [t.name for t in env.tools] == ["query_knowledge_base_sparse"]


def test_resolve_token_prefers_the_explicit_value_and_treats_empty_as_none(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert resolve_token("explicit") == "explicit"
    assert resolve_token(None) == "from-env"
    assert resolve_token("") is None
    monkeypatch.delenv(TOKEN_ENV)
    assert resolve_token(None) is None


def test_run_config_never_writes_the_token(tmp_path):
    cfg = compose_run_config(f"output_dir={tmp_path}")
    cfg = replace(cfg, gateway=replace(cfg.gateway, auth_token=TOKEN))
    assert cfg.to_dict()["gateway"]["auth_token"] == "***"
    assert cfg.gateway.auth_token == TOKEN


def test_gateway_process_passes_the_token_and_health_checks_with_it(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "contents": f"{p.title}\n{p.text}"}) + "\n" for p in PASSAGES))
    args = ["--config", str(SPARSE_FILE), "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"),
            "--output-dir", str(tmp_path)]
    with GatewayProcess(args, auth_token=TOKEN, ready_timeout_s=120) as gw:
        url = gw.wait_ready()
        base = url.removesuffix("/mcp")
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 401
        assert TOKEN not in " ".join(gw.args)  # the child got it through its environment
        r = httpx.post(f"{base}/proxy/tools/query_knowledge_base_sparse/call", json={"query": "Veltrix"},
                       headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert r.status_code == 200 and r.json()["structured_content"]["results"][0]["id"] == "d1"
    assert Path(tmp_path / "tool_stats" / "realtime_calls.jsonl").read_text().count("\n") == 1
