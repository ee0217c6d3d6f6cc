"""`python -m bench.llm_speed` runs end to end at its smoke size, as docs/agents.md shows it: a row per --parallel
with every figure filled and the target's verdict (figures not checked). Skipped without the built llama-server
(failed under ROLLOUT_REQUIRE_LLAMA=1)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from bench.llm_speed import TARGET_SHARE, Row, ratio_lines, union_s
from rollout.paths import PROJECT_ROOT
from tests.llm_server.jinja_server import llama_server_binary
from tests.llm_server.server import LlamaMissing, no_llama


def documented_command() -> list[str]:
    """The bench's command line in docs/agents.md (one, in a fenced block), as the shell splits it."""
    page = (PROJECT_ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in page.splitlines() if line.strip().startswith("python -m bench.llm_speed")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_busy_time_is_the_union_of_the_servers_intervals():
    assert union_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.8)]) == 4.0
    assert union_s([]) == 0.0


def test_tasks_per_second_is_compared_with_the_first_parallel_of_each_thread_count():
    def row(parallel, threads, phase_s):
        return Row(parallel, threads, tasks=8, requests=16, written=100, command_s=1.0, phase_s=phase_s, model_s=1.0,
                   busy_s=1.0, counters={})
    rows = [row(1, "1", 80.0), row(1, "auto", 100.0), row(2, "1", 40.0), row(4, "1", 100.0), row(2, "auto", 80.0)]
    assert list(ratio_lines(rows)) == ["tasks/s at --parallel 2 / at --parallel 1, threads 1: 2.00x",
                                       "tasks/s at --parallel 4 / at --parallel 1, threads 1: 0.80x",
                                       "tasks/s at --parallel 2 / at --parallel 1, threads auto: 1.25x"]
    assert list(ratio_lines(rows[:1])) == []


@pytest.mark.slow
def test_the_documented_bench_runs_at_its_smoke_size(tmp_path):
    try:
        llama_server_binary(build=False)
    except LlamaMissing as e:
        no_llama(e)
    words = documented_command()
    assert words[:3] == ["python", "-m", "bench.llm_speed"]
    done = subprocess.run([sys.executable, *words[1:], "--smoke"], cwd=PROJECT_ROOT,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, capture_output=True, text=True,
                          timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["parallel", "threads"])
    assert lines[header].endswith(f"target <= {TARGET_SHARE:.0%}")
    rows = [line.split() for line in lines[header + 1:] if line[:8].strip().isdigit()]
    # --smoke: 1 question at --parallel 1, on the documented command's first --threads.
    assert [row[:3] for row in rows] == [["1", words[words.index("--threads") + 1], "1"]]
    assert all(row[-1] == "met" or row[-2:] == ["NOT", "met"] for row in rows)
    assert any(line.startswith("/proc/loadavg after: ") for line in lines)


def test_bad_numbers_are_one_line_and_exit_2():
    done = subprocess.run([sys.executable, "-m", "bench.llm_speed", "--parallel", "0"], cwd=PROJECT_ROOT,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
