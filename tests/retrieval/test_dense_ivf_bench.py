"""bench/dense_index.py runs end to end at a toy size and prints a row per index kind (figures not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT


def test_dense_index_bench_runs_at_a_toy_size(tmp_path: Path) -> None:
    command = [
        sys.executable, "dense_index.py", "--vectors", "2000", "--queries", "20", "--rate-queries", "5",
        "--hnsw-vectors", "1000", "--pq-m", "8", "--cache-dir", str(tmp_path),
    ]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        command, cwd=PROJECT_ROOT / "bench", env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout
    assert "2,000 clustered 384-d unit vectors" in table and "/proc/loadavg before" in table
    for label in ("flat ", "hnsw (first 1,000 vectors)", "ivf ", "ivf-pq "):
        assert f"\n{label}" in table, label
    assert sum("  recall@10 vs flat" in line for line in table.splitlines()) == 4  # one per kind
    assert (tmp_path / "vectors-v2-2000x384-seed0.npy").is_file()
