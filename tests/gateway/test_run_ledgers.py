"""One gateway, several runs: each run registers its folder with POST /runs and its calls land in its own ledger.

A real gateway on loopback with a token; the calls come from the runs' own MCP environments (their run id in each
call's `_meta`) and from the HTTP proxy (`X-Run-Id`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from envs import HttpMCPRagEnv
from rollout.gateway.runs_api import MAX_BODY_BYTES
from rollout.gateway.stats import CallStat, RunLedgers
from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
from rollout.run_folder import CALLS_FILE, DEGRADED_FILE, STATS_DIR, calls_path
from rollout.wire import TOKEN_ENV
from tests.gateway.loopback import gateway_served, sparse_kb

TOKEN = "runs-s3cret"
SPARSE_FILE = GATEWAYS_DIR / "rag_sparse_only.json"
TOOL = "query_knowledge_base_sparse"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway whose own folder (its --output-dir) is `own`; yields (base URL, own)."""
    own = tmp_path_factory.mktemp("gateway-own")
    with gateway_served(load_gateway_file(SPARSE_FILE), sparse_kb(), own, auth_token=TOKEN) as base:
        yield base, own


def register(base: str, run_id: str, output_dir: Path | str, headers: dict[str, str] | None = None,
             **kwargs) -> httpx.Response:
    return httpx.post(f"{base}/runs", json={"run_id": run_id, "output_dir": str(output_dir)},
                      headers=AUTH if headers is None else headers, timeout=10, **kwargs)


def ledger_ids(run_dir: Path) -> list[str]:
    path = calls_path(run_dir)
    return [json.loads(line)["call_id"] for line in path.read_text().splitlines()] if path.exists() else []


async def call_as(base: str, run_id: str | None, *call_ids: str) -> None:
    """Each call id one call of `run_id`'s environment, as a run's workers make them."""
    async with HttpMCPRagEnv(f"{base}/mcp", SPARSE_FILE, run_id=run_id, auth_token=TOKEN) as env:
        for call_id in call_ids:
            _, record = await env.call(TOOL, {"query": "Voss Kelmor"}, task_id=f"task-{call_id}", call_id=call_id)
            assert record.ok, record.error


def proxy_call(base: str, call_id: str, run_id: str | None = None) -> None:
    headers = {**AUTH, "X-Call-Id": call_id, **({"X-Run-Id": run_id} if run_id else {})}
    r = httpx.post(f"{base}/proxy/tools/{TOOL}/call", json={"query": "Veltrix"}, headers=headers, timeout=30)
    assert r.status_code == 200 and not r.json()["is_error"], r.text


async def test_two_registered_runs_and_the_unregistered_calls_fill_three_ledgers_each_call_once(gateway, tmp_path):
    base, own = gateway
    job_a, job_b = tmp_path / "job-a", tmp_path / "job-b"
    answer = register(base, "run-a", job_a)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"run_id": "run-a", "ledger": str(job_a / STATS_DIR / CALLS_FILE)}
    await call_as(base, "run-a", "a1", "a2")
    assert register(base, "run-b", job_b).status_code == 200
    await call_as(base, "run-b", "b1")
    proxy_call(base, "b-proxy", run_id="run-b")
    await call_as(base, "run-a", "a-late")  # a call of the first run after the next one started: still its own
    # Calls of no registered run go where the gateway was started: without a run id, or with one never registered.
    proxy_call(base, "plain")
    await call_as(base, "run-never-registered", "stray")
    # A run registered with the gateway's own folder shares its ledger (one open file, every line once).
    assert register(base, "run-own", own).status_code == 200
    await call_as(base, "run-own", "own1")

    assert sorted(ledger_ids(job_a)) == ["a-late", "a1", "a2"]
    assert sorted(ledger_ids(job_b)) == ["b-proxy", "b1"]
    assert sorted(ledger_ids(own)) == ["own1", "plain", "stray"]
    line = json.loads(calls_path(job_a).read_text().splitlines()[0])
    assert line["task_id"] == "task-a1" and line["tool_name"] == TOOL and line["ok"]


@pytest.mark.parametrize(
    ("headers", "body", "status", "says"),
    [
        ({}, {"run_id": "r", "output_dir": "/tmp"}, 401, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, {"run_id": "r", "output_dir": "/tmp"}, 401, "wrong bearer token"),
        (AUTH, b"not json", 400, "the body is not JSON"),
        (AUTH, ["r", "/tmp"], 400, "a JSON object with run_id and output_dir alone"),
        (AUTH, {"run_id": "r"}, 400, "a JSON object with run_id and output_dir alone"),
        (AUTH, {"run_id": "r", "output_dir": "/tmp", "extra": 1}, 400, "run_id and output_dir alone"),
        (AUTH, {"run_id": "", "output_dir": "/tmp"}, 400, "run_id must be a non-empty string"),
        (AUTH, {"run_id": "r", "output_dir": "relative/folder"}, 400, "output_dir must be an absolute path"),
        ({**AUTH, "Host": "evil.example"}, {"run_id": "r", "output_dir": "/tmp"}, 421, "loopback name"),
        ({**AUTH, "Origin": "http://evil.example"}, {"run_id": "r", "output_dir": "/tmp"}, 403, "no other web origin"),
    ],
)
def test_registration_is_refused_without_the_token_with_a_bad_body_or_from_elsewhere(gateway, headers, body, status,
                                                                                     says, tmp_path, monkeypatch):
    base, _ = gateway
    monkeypatch.chdir(tmp_path)  # where a relative output_dir would land were it accepted
    sent = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{base}/runs", content=sent, headers={"Content-Type": "application/json", **headers}, timeout=10)
    assert r.status_code == status and says in r.json()["error"] and "\n" not in r.json()["error"]
    if status == 401:
        assert TOKEN_ENV in r.json()["error"]
    assert list(tmp_path.iterdir()) == []


def test_registration_wants_json_and_a_small_body(gateway, tmp_path):
    base, _ = gateway
    form = httpx.post(f"{base}/runs", data={"run_id": "r", "output_dir": str(tmp_path)}, headers=AUTH, timeout=10)
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    huge = register(base, "r" * MAX_BODY_BYTES, tmp_path)
    assert huge.status_code == 413
    unwritable = tmp_path / "a-file"
    unwritable.write_text("not a folder")
    refused = register(base, "r", unwritable)
    assert refused.status_code == 400 and f"cannot write the ledger in {unwritable}" in refused.json()["error"]


def test_a_run_that_started_its_folder_over_gets_a_new_ledger_file(tmp_path):
    # resume=false removes the ledger of an earlier run into the folder before registering: the gateway, holding
    # that folder's ledger open from the earlier run, writes the new run's calls to a new file.
    ledgers = RunLedgers()
    ledgers.register("first", tmp_path).record(_stat("c1"))
    calls_path(tmp_path).unlink()
    ledgers.register("second", tmp_path)
    ledgers.collector_for("second").record(_stat("c2"))
    ledgers.close()
    assert ledger_ids(tmp_path) == ["c2"]


def _stat(call_id: str) -> CallStat:
    return CallStat(call_id=call_id, tool_name=TOOL, task_id="t1", worker_id="w0", ok=True, outcome="ok", error=None,
                    duration_ms=1.0, timestamp=0.0, result_ids=[])


def test_a_removed_run_folder_does_not_keep_the_others_from_their_degraded_list(tmp_path):
    # A run refused after it registered has its folder removed; the gateway serves the sweep's next runs on.
    ledgers = RunLedgers()
    ledgers.register("refused", tmp_path / "refused")
    ledgers.register("next", tmp_path / "next")
    shutil.rmtree(tmp_path / "refused")
    degraded = {"lookup": "its schema was simplified"}
    ledgers.note_degraded(degraded)
    ledgers.close()
    assert json.loads((tmp_path / "next" / STATS_DIR / DEGRADED_FILE).read_text()) == degraded
