"""bench/corpus_scale.py runs end to end at a toy size, its own baseline the checkout itself: every column is filled
(figures not checked), the BrowseComp-Plus-sized build's too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT


def test_corpus_scale_bench_runs_at_a_toy_size(tmp_path: Path) -> None:
    command = [sys.executable, "bench/corpus_scale.py", "--smoke", "--baseline", str(PROJECT_ROOT),
               "--corpora", str(tmp_path / "corpora")]
    done = subprocess.run(command, cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("checkout | passages"))
    ours = next(line for line in lines if line.startswith("rollout | 2,000 |"))
    assert len(ours.split(" | ")) == len(header.split(" | ")) and " - " not in f" {ours} "  # every column measured
    assert any(line.startswith("baseline | 2,000 |") for line in lines)
    assert any(line.startswith("at 2,000 passages, baseline / rollout: build s") for line in lines)
    # BrowseComp-Plus-sized: long documents in its corpus format, BM25 over them whole, the build's peak memory.
    bcp = next(line for line in lines if line.startswith("BrowseComp-Plus-sized | 100 |")).split(" | ")
    assert all(cell != "-" for cell in bcp[2:7])  # the build's columns
    assert any(line.startswith("BrowseComp-Plus-sized BM25 build over 100 documents of ~3,000 words: peak anon ")
               and "target <= 3 GiB met" in line for line in lines)
