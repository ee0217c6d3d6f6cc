"""bench/dense_shards.py runs end to end at its smoke size on a two-node cluster of its own and prints a row per
layout, both layouts returning the same rows and scores (the figures themselves are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.paths import PROJECT_ROOT


@pytest.mark.slow
def test_dense_shards_bench_runs_at_its_smoke_size(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "dense_shards.py", "--smoke", "--cache-dir", str(tmp_path)],
                          cwd=PROJECT_ROOT / "bench", env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "20,000 x 64 float32 unit vectors" in out and "/proc/loadavg before" in out
    rows = {line.split("|")[0].strip(): line for line in out.splitlines() if line.startswith(("1 shard ", "2 shards "))}
    assert set(rows) == {"1 shard", "2 shards"}
    placed = rows["2 shards"].split("|")[1]
    assert sorted(part.split()[0] for part in placed.split(",")) == ["A", "B"], "one shard on each node"
    assert "identical rows and scores for all 548 queries: yes" in out
    assert (tmp_path / "flat-20000x64-s1" / "meta.json").is_file() and (tmp_path / "flat-20000x64-s2").is_dir()
