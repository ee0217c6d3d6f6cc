"""bench/lucene_path.py runs end to end at a toy size, as docs/retrieval.md shows it (figures not checked)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

from rollout.paths import PROJECT_ROOT
from tests.retrieval.test_lucene import INSTALL, MODULES, no_lucene


def documented_command() -> list[str]:
    """The bench's command line in docs/retrieval.md (one, in a fenced block), as the shell splits it."""
    page = (PROJECT_ROOT / "docs" / "retrieval.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in page.splitlines() if line.strip().startswith("python bench/lucene_path.py")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_documented_lucene_path_bench_runs_at_a_toy_size(tmp_path: Path) -> None:
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        no_lucene(f"{' and '.join(missing)} not installed: {INSTALL}")
    words = documented_command()
    assert words[:2] == ["python", "bench/lucene_path.py"]
    # The documented flags, then --smoke (a toy size, no larger corpus) and a cache of this test's own.
    command = [sys.executable, *words[1:], "--smoke", "--cache", str(tmp_path)]
    done = subprocess.run(command, cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("200 passages, 64 queries, k=10, 2 rounds interleaved") for line in lines)
    for variant in ("Pyserini one", "Pyserini batch", "Pyserini bare one", "Pyserini bare batch", "rollout one",
                    "rollout batch"):
        assert any(line.split(" q/s")[0].strip().rsplit(" ", 1)[0].strip() == variant for line in lines), variant
    for ratio in ("rollout / Pyserini, one query a call: ", "rollout / Pyserini, batches of 16: "):
        assert any(line.strip().startswith(ratio) and line.strip().endswith("x") for line in lines), ratio
    assert any(line.startswith("/proc/loadavg before: ") for line in lines)
