"""The harness under faults, with real Ray, a real gateway process and `agent=simulated`:
a task over its time limit, a worker that dies, a gateway that dies, Ctrl-C and resuming after it.

Resuming a finished part, and refusing another gateway file, run in tests/harness/test_repeats.py's scenario."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rollout.paths import PROJECT_ROOT
from rollout.run.config import RunConfig, compose_run_config
from rollout.run.driver import run
from tests.harness.agents import FAIL_ONCE_ENV
from tests.test_logs import LOG_LINE
from tests.test_rollout_command import rollout_command, rollout_command_env, rollout_command_line

SMALL_KB = ["dataset.n_passages=300", "dataset.n_questions=60", "mode=sparse", "progress=false"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def simulated(out: Path, cache_dir: Path, *extra: str) -> RunConfig:
    return compose_run_config(*SMALL_KB, "agent=simulated", f"output_dir={out}", f"cache_dir={cache_dir}", *extra)


def lines_in(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def wait_for_lines(path: Path, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while lines_in(path) < n:
        assert time.monotonic() < deadline, f"{path} never reached {n} lines"
        time.sleep(0.05)


def gateway_pids(output_dir: Path) -> list[int]:
    """Pids of gateway processes writing into `output_dir`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rollout.gateway" in cmd and str(output_dir).encode() in cmd:
            pids.append(int(proc.name))
    return pids


def test_a_task_over_its_time_limit_keeps_its_partial_trajectory(ray_local, cache_dir, tmp_path):
    # Room for a first search well inside the limit on a loaded machine, and turns enough (30 x 0.4 s) to
    # go past it whatever the load.
    cfg = simulated(tmp_path / "run", cache_dir, "agent.llm_latency_s=0.4", "agent.turns=30",
                    "task_timeout_s=6", "dataset.limit=4", "workers=1")  # one actor runs the four at once
    outcome = run(cfg)
    tasks = read_jsonl(outcome.output_dir / "trajectory.jsonl")
    assert [t["status"] for t in tasks] == ["timeout"] * 4
    for t in tasks:
        kinds = [e["type"] for e in t["events"]]
        assert "tool_call" in kinds and "tool_result" in kinds  # the turns done before the limit
        assert kinds[-1] == "error" and t["events"][-1]["kind"] == "timeout"
        assert t["tool_calls"] and "time limit of 6 s" in t["error"]
    assert outcome.summary.timeouts == 4


def test_a_dead_worker_s_tasks_run_again_elsewhere(ray_local, cache_dir, tmp_path):
    cfg = simulated(tmp_path / "run", cache_dir, "dataset.limit=12", "workers=2", "concurrency_per_worker=3")
    victim = compose_run_config(*SMALL_KB, f"cache_dir={cache_dir}")
    from rollout.data.dataset import prepare_data

    question = prepare_data(victim.dataset, cache_dir).questions[4].question
    cfg = replace(cfg, agent={"_target_": "tests.harness.agents.CrashOnceAgent", "question": question,
                              "marker": str(tmp_path / "crashed")})
    outcome = run(cfg)
    tasks = read_jsonl(outcome.output_dir / "trajectory.jsonl")
    assert (tmp_path / "crashed").exists()
    assert sorted(t["id"] for t in tasks) == sorted({t["id"] for t in tasks}) and len(tasks) == 12
    assert all(t["status"] == "ok" for t in tasks)
    retried = [t for t in tasks if t["attempts"] > 1]
    assert any(t["question"] == question for t in retried)  # the crashing task, and any beside it on that actor
    # Every call is counted once: the report counts the kept attempts' calls; the lost attempt's apart.
    report = json.loads((outcome.output_dir / "tool_stats" / "report.json").read_text())
    assert report["summary"]["total_calls"] == sum(len(t["tool_calls"]) for t in tasks) == 12
    victim = next(t for t in tasks if t["question"] == question)
    assert {"task_id": victim["id"], "attempt": 1, "calls": 1, "tools": ["query_knowledge_base_sparse"]} in \
        report["discarded_attempts"]
    assert report["summary"]["discarded_calls"] >= 1


def test_the_gateway_dies_mid_run_and_no_task_is_lost(ray_local, cache_dir, tmp_path):
    out = tmp_path / "run"
    cfg = simulated(out, cache_dir, "agent.llm_latency_s=0.15", "dataset.limit=48", "workers=2",
                    "concurrency_per_worker=4")
    killed: list[int] = []

    def kill_gateway_once_tasks_finish() -> None:
        wait_for_lines(out / "trajectory.jsonl", 6)
        for pid in gateway_pids(out):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_gateway_once_tasks_finish, daemon=True)
    killer.start()
    outcome = run(cfg)
    killer.join(timeout=5)
    assert killed, "the gateway was never found to kill"
    tasks = read_jsonl(out / "trajectory.jsonl")
    assert len(tasks) == 48 and len({t["id"] for t in tasks}) == 48
    assert all(t["status"] == "ok" for t in tasks), [t["error"] for t in tasks if t["error"]]
    assert all(c["ok"] for t in tasks for c in t["tool_calls"])
    assert outcome.summary.errors == 0
    assert not gateway_pids(out)  # the restarted gateway was stopped with the run


@pytest.mark.slow
def test_ctrl_c_keeps_finished_tasks_and_the_same_command_resumes(cache_dir, tmp_path):
    # `rollout run` as a user types it, from an empty folder and piped: the resumed run also shows that a run
    # leaves its working directory empty and prints its summary table whole through a pipe.
    out, cwd = tmp_path / "run", tmp_path / "cwd"
    cwd.mkdir()
    args = [*SMALL_KB, "agent=simulated", "agent._target_=tests.harness.agents.FailOnceAgent",
            "agent.llm_latency_s=0.2", "dataset.limit=20", "workers=1", "concurrency_per_worker=2",
            f"output_dir={out}", f"cache_dir={cache_dir}"]
    proc = subprocess.Popen(rollout_command_line("run", *args), cwd=cwd, env=rollout_command_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(out / "trajectory.jsonl", 4)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "resume" in err
    first = read_jsonl(out / "trajectory.jsonl")
    assert 4 <= len(first) < 20
    summary = json.loads((out / "evaluation_summary.json").read_text())
    assert summary["complete"] is False and summary["n"] == len(first)

    # `ray.address: null` starts a Ray of the run's own: an address in the environment (or a cluster a
    # `ray start` left behind) is not joined, so the closed port below cannot fail the run. One task of the
    # resumed run fails, so its worker logs a warning.
    fail_once = {FAIL_ONCE_ENV: str(tmp_path / "failed-once")}
    again = rollout_command("run", *args, cwd=cwd, env={"RAY_ADDRESS": "127.0.0.1:9", **fail_once})
    assert again.returncode == 0, again.stderr[-2000:]
    tasks = read_jsonl(out / "trajectory.jsonl")
    assert len(tasks) == 20 and len({t["id"] for t in tasks}) == 20
    assert [t["error"] for t in tasks if t["status"] != "ok"] == ["RuntimeError: failing once on purpose"]
    assert tasks[: len(first)] == first  # finished work untouched
    assert json.loads((out / "evaluation_summary.json").read_text())["complete"] is True
    assert list(cwd.iterdir()) == []
    # The log is on stderr: the driver's, the gateway child's, Ray's and the workers' lines in one format, a
    # worker's named, with none of Ray's decorations (its "(Actor pid=N) " prefix, colours, "[repeated 2x across
    # cluster]" notes, its token notice); no library's DEBUG line and no progress bar redrawn into the pipe. The
    # run's log file reads the same. (A cold build's lines: tests/gateway/test_console.py.)
    rollout_log = (out / "rollout.log").read_text()
    assert "Gateway ready at" in again.stderr
    assert [line for line in again.stderr.splitlines() if not LOG_LINE.match(line)] == []
    assert " DEBUG " not in again.stderr and "\r" not in again.stderr and "%|" not in again.stderr
    assert not any(LOG_LINE.match(line) for line in again.stdout.splitlines())
    assert all(LOG_LINE.match(line) for line in rollout_log.splitlines())
    for log in (again.stderr, rollout_log):
        assert re.search(r" WARNING rollout\.run\.worker: \[worker-0\] task \S+ failed: failing once on purpose", log)
        for decoration in ("\x1b[", "(RolloutWorker pid=", "pid=", "repeated", "Token authentication"):
            assert decoration not in log, decoration
    header = next(line for line in again.stdout.splitlines() if "EM" in line and "┃" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "EM", "F1", "contains", "recall", "errors", "timeouts", "infra", "truncated", "out of ctx", "time (s)"]
    assert "query_knowledge_base_sparse" in again.stdout


def start_gateway(port: int, cache_dir: Path, out: Path) -> subprocess.Popen:
    """The demo gateway of SMALL_KB on its own, as a user would start one for `gateway.url=`."""
    cmd = [sys.executable, "-m", "rollout.gateway", "--config", "conf/gateways/rag_sparse_only.json",
           "--port", str(port), "--cache-dir", str(cache_dir), "--output-dir", str(out),
           "--demo-passages", "300", "--demo-questions", "60", "--ready-file", str(out / "ready")]
    (out / "ready").unlink(missing_ok=True)
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT)
    deadline = time.monotonic() + 300
    while not (out / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_a_killed_external_gateway_fails_tasks_as_infra_errors_and_a_rerun_finishes_them(ray_local, cache_dir, tmp_path):
    from rollout.listen import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    gw_dir = tmp_path / "gateway"
    gw_dir.mkdir()
    common = (f"gateway.url=http://127.0.0.1:{port}/mcp", "gateway.reconnect_timeout_s=1", "agent.llm_latency_s=0.1",
              "dataset.limit=24", "workers=2", "concurrency_per_worker=2")
    out = tmp_path / "run"
    gateway = start_gateway(port, cache_dir, gw_dir)
    killed_at: list[float] = []

    def kill_gateway_once_tasks_finish() -> None:
        wait_for_lines(out / "trajectory.jsonl", 4)
        gateway.kill()
        killed_at.append(time.time())

    killer = threading.Thread(target=kill_gateway_once_tasks_finish, daemon=True)
    killer.start()
    try:
        run(simulated(out, cache_dir, *common))
        killer.join(timeout=5)
        assert killed_at, "the gateway was never killed"
        tasks = read_jsonl(out / "trajectory.jsonl")
        assert len(tasks) == 24
        after_kill = [t for t in tasks if any(c["started"] > killed_at[0] for c in t["tool_calls"])]
        assert after_kill and all(t["status"] == "infra_error" for t in after_kill), [t["status"] for t in after_kill]
        assert all("transport_error" in t["error"] for t in after_kill)
        assert sum(t["status"] == "ok" for t in tasks) < 24

        gateway = start_gateway(port, cache_dir, gw_dir)
        again = run(simulated(out, cache_dir, *common))  # the same command: resumes, reruns the failures
        tasks = read_jsonl(out / "trajectory.jsonl")
        assert len(tasks) == 24 and all(t["status"] == "ok" for t in tasks)
        clean = run(simulated(tmp_path / "clean", cache_dir, *common))
        assert again.summary.metrics == clean.summary.metrics
    finally:
        gateway.kill()


def wait_until_gone(pids: list[int], timeout_s: float = 60.0) -> list[int]:
    """The pids of `pids` still running after waiting up to `timeout_s` for them to end."""
    deadline = time.monotonic() + timeout_s
    while (alive := [pid for pid in pids if Path(f"/proc/{pid}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


@pytest.mark.slow
def test_a_driver_killed_while_ray_starts_or_mid_run_leaves_no_gateway_behind(cache_dir, tmp_path):
    # SIGKILL gives the driver no chance to stop its gateway child: the child must notice on its own.
    leftover: list[int] = []
    for when in ("ray-starting", "mid-run"):
        out = tmp_path / when
        args = [*SMALL_KB, "agent=simulated", "agent.llm_latency_s=0.5", "dataset.limit=20", "workers=1",
                f"output_dir={out}", f"cache_dir={cache_dir}"]
        proc = subprocess.Popen(rollout_command_line("run", *args), cwd=tmp_path, env=rollout_command_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while not (pids := gateway_pids(out)):  # launched just before Ray starts (rollout.run.driver)
                assert proc.poll() is None and time.monotonic() < deadline, "the run started no gateway"
                time.sleep(0.02)
            if when == "mid-run":
                wait_for_lines(out / "trajectory.jsonl", 1)
            proc.kill()
            proc.wait()
            leftover += wait_until_gone(pids)
        finally:
            proc.kill()
            for pid in gateway_pids(out):
                os.kill(pid, signal.SIGKILL)
    assert leftover == []
