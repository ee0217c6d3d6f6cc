"""GatewayProcess: a gateway that dies is restarted on the same URL, with its indexes and call ledger kept."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from rollout.errors import GatewayError
from rollout.gateway_file import GATEWAYS_DIR
from rollout.report import load_calls
from rollout.run.gateway_process import GatewayProcess
from rollout.run_folder import calls_path
from tests.gateway.loopback import kill

SPARSE_FILE = GATEWAYS_DIR / "rag_sparse_only.json"
TOOL = "query_knowledge_base_sparse"


def demo_args(cache_dir: Path, output_dir: Path) -> list[str]:
    """A small demo knowledge base with the sparse tool only: no encoder to load, starts in seconds."""
    return ["--config", str(SPARSE_FILE), "--demo-passages", "200", "--demo-questions", "20",
            "--cache-dir", str(cache_dir), "--output-dir", str(output_dir)]


def call(url: str, call_id: str, run_id: str | None = None) -> dict:
    base = url.removesuffix("/mcp")
    headers = {"X-Call-Id": call_id, **({"X-Run-Id": run_id} if run_id else {})}
    r = httpx.post(f"{base}/proxy/tools/{TOOL}/call", json={"query": "born in"}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_killed_gateway_restarts_on_the_same_url_from_cached_indexes_and_keeps_its_ledgers(
        cache_dir, tmp_path, capfd, caplog):
    caplog.set_level(logging.WARNING, logger="rollout.run.gateway_process")
    other_run = tmp_path / "other-run"
    with GatewayProcess(demo_args(cache_dir, tmp_path), ready_timeout_s=300) as gw:
        url = gw.wait_ready()
        first_pid = gw.pid
        assert gw.is_alive()
        assert gw.register_run("run-2", other_run) == calls_path(other_run)
        assert not call(url, "before-1")["is_error"]
        assert not call(url, "before-2")["is_error"]
        assert not call(url, "run-2-before", run_id="run-2")["is_error"]
        kill(gw)
        assert not gw.is_alive()
        assert gw.restart() == url
        assert gw.is_alive() and gw.pid != first_pid and gw.restarts == 1
        answer = call(url, "after-1")
        # The restarted gateway knows the runs registered with the one before: their calls still go to their ledger.
        assert not call(url, "run-2-after", run_id="run-2")["is_error"]
    assert not answer["is_error"] and answer["structured_content"]["results"]
    assert load_calls(tmp_path)["call_id"].tolist() == ["before-1", "before-2", "after-1"]
    assert load_calls(other_run)["call_id"].tolist() == ["run-2-before", "run-2-after"]
    err = capfd.readouterr().err
    # The first launch builds the index (or loads it, when an earlier test filled the cache); the restart loads it.
    assert err.count("built sparse index") + err.count("loaded sparse index") == 2
    assert err.count("built sparse index") <= 1
    assert f"died (killed by SIGKILL, exit code -9); restarted it at {url}" in caplog.text


def test_restart_waits_for_a_port_someone_else_holds_for_a_moment(cache_dir, tmp_path):
    with GatewayProcess(demo_args(cache_dir, tmp_path), ready_timeout_s=300, rebind_timeout_s=60) as gw:
        url = gw.wait_ready()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        kill(gw)
        squatter = socket.create_server(("127.0.0.1", port))
        released = threading.Event()

        def release_soon() -> None:
            time.sleep(1.0)
            released.set()
            squatter.close()

        threading.Thread(target=release_soon, daemon=True).start()
        assert gw.restart() == url
        assert released.is_set()  # it did not bind while the port was taken
        assert not call(url, "c1")["is_error"]


def test_restart_gives_up_naming_the_port_when_it_stays_taken(cache_dir, tmp_path):
    with GatewayProcess(demo_args(cache_dir, tmp_path), ready_timeout_s=300, rebind_timeout_s=0.5) as gw:
        url = gw.wait_ready()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        kill(gw)
        with socket.create_server(("127.0.0.1", port)), pytest.raises(GatewayError, match=f"127.0.0.1:{port}"):
            gw.restart()
        assert not gw.is_alive()


def test_restart_needs_a_gateway_that_served_once():
    gw = GatewayProcess(["--config", str(SPARSE_FILE)])
    try:
        with pytest.raises(GatewayError, match="wait_ready"):
            gw.restart()
    finally:
        gw.stop()


def test_a_gateway_that_stops_answering_counts_as_dead_and_is_restarted(cache_dir, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rollout.run.gateway_process")
    with GatewayProcess(demo_args(cache_dir, tmp_path), health_interval_s=0.2, health_timeout_s=0.5) as gw:
        url = gw.wait_ready()
        assert gw.is_alive()
        os.kill(gw.pid, signal.SIGSTOP)  # still a running process, but it answers nothing
        deadline = time.monotonic() + 30
        while gw.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not gw.is_alive(), "an unanswering gateway should count as dead"
        assert "has not answered" in caplog.text
        assert gw.restart() == url
        assert gw.is_alive()
        assert not call(url, "after-hang")["is_error"]
    assert "stopped answering and was killed" in caplog.text
