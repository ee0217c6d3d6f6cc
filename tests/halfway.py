"""A cache writer stopped halfway in a process of its own, for the tests of what a killed write leaves behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest


def stopped_halfway(script: str, args: list[str], marker: Path, cache: Path) -> tuple[subprocess.Popen, set[Path]]:
    """`python -c script *args`, which writes `marker` once it is halfway and then hangs; returns the process and the
    temporaries that appeared in `cache` for it."""
    before = set(cache.glob(".tmp-*"))
    child = subprocess.Popen([sys.executable, "-c", script, *args])
    deadline = time.monotonic() + 300  # a bound for a child that hangs elsewhere, not a speed check
    while not marker.exists():
        assert child.poll() is None, "the writer ended before it was halfway"
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail("the writer never got halfway")
        time.sleep(0.05)
    return child, set(cache.glob(".tmp-*")) - before
