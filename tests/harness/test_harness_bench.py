"""bench/harness.py runs end to end at a toy size: the throughput rows and the gateway-stop row are printed, and the
gateway it launches takes the flags it is given (figures not checked; the memory rows run the whole command, which
tests/test_cli.py and the end-to-end tests cover)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT


def test_harness_bench_runs_at_a_toy_size(cache_dir: Path) -> None:
    command = [sys.executable, "harness.py", "--cache-dir", str(cache_dir), "--latency", "0.01", "--turns", "2",
               "--concurrency", "2", "--tasks-per-slot", "3", "--stop-sessions", "2", "--skip-memory"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(command, cwd=PROJECT_ROOT / "bench", env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "Traceback" not in done.stderr
    table = done.stdout
    assert "Throughput: 2 turns x 10 ms simulated LLM per task" in table
    assert "with tool calls  2" in table and "LLM turns only   2" in table
    assert "gateway stop with 2 open sessions" in table
