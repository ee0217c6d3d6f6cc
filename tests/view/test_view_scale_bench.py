"""bench/view_scale.py runs end to end at a toy size: every row is printed and every page it fetched was a 200
(figures not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT
from rollout.view.index import INDEX_FILE

ROWS = (
    "(a) index       cold build", "(b) index       load from the cache", "fresh process: imports",
    "fresh process: import scipy.special", "fresh process: open_runs", "fresh process: first GET /run/0",
    "open + first GET (imports excluded)", "imports + open + first GET", "GET /run/0 again",
    "status=error", "text search", "sort by tokens", "page 250", "ok, wrong, one tool", "median of 20 random tasks",
    "p95 of 20 random tasks", "median, status=ok&right=wrong&sort=tokens&desc=1", "p95, status=ok&right=wrong&sort",
    "nothing new", "after 100 lines appended",
)


def test_view_scale_bench_runs_at_a_toy_size(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "view_scale.py", "--tasks", "300", "--samples", "20", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(command, cwd=PROJECT_ROOT / "bench", env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    table = done.stdout
    assert "300 tasks" in table and "generated in" in table
    for row in ROWS:
        assert row in table, row
    # the child's two GETs, a warm-up and 5 run pages, 2 x 20 task pages, 3 + 1 polls: all answered 200
    assert "responses: 52 fetched, 52 × HTTP 200\n" in table
    assert "not as expected" not in table

    # The folder is left as generated: the appended lines cut off, the cache put back.
    trajectory = out / "trajectory.jsonl"
    assert sum(1 for _ in trajectory.open(encoding="utf-8")) == 300
    cache = json.loads((out / INDEX_FILE).read_text(encoding="utf-8"))
    assert cache["size"] == trajectory.stat().st_size and len(cache["columns"]["id"]) == 300
