"""bench/bm25_at_scale.py runs end to end at a toy size: every engine measured in process and through a gateway,
and the pruned answers compared with the exhaustive ones (figures not checked)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.paths import PROJECT_ROOT
from rollout.retrieval.lucene import INSTALL
from tests.retrieval.test_lucene import MODULES, no_lucene


@pytest.mark.slow
def test_bm25_at_scale_bench_runs_at_a_toy_size(tmp_path: Path) -> None:
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        no_lucene(f"{' and '.join(missing)} not installed: {INSTALL}")
    command = [sys.executable, "bench/bm25_at_scale.py", "--smoke", "--work", str(tmp_path),
               "--corpora", str(tmp_path / "corpora")]
    done = subprocess.run(command, cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    lines = done.stdout.splitlines()
    for where in ("process", "gateway"):
        for engine in ("pruned", "exhaustive", "lucene"):
            row = next(line for line in lines if line.startswith(f"{where} | 3,000 | {engine} | "))
            assert all(float(cell.replace(",", "")) > 0 for cell in row.split(" | ")[3:])
        assert any(line.startswith(f"3,000 passages, {where}: pruned / lucene ") for line in lines)
    assert "3,000 passages: pruned answers equal the exhaustive ones (ids and scores, k 10 and 1,000): yes" in lines
