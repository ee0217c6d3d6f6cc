"""One driver per run folder: a second process on a locked folder fails at once with one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rollout.errors import RunFolderBusy
from rollout.run.lock import hold_run_lock
from rollout.run_folder import LOCK_FILE

HOLDER = textwrap.dedent("""
    import sys
    from rollout.run.lock import hold_run_lock
    with hold_run_lock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.readline()  # hold the lock until the test closes our stdin
""")


def test_a_second_process_is_refused_until_the_holder_exits(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderBusy) as busy, hold_run_lock(out):
            pass
        message = str(busy.value)
        assert "\n" not in message and str(out) in message and f"pid {holder.pid}" in message
        assert "output_dir=" in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with hold_run_lock(out) as lock:  # the kernel released the lock with its holder
        assert lock == out / LOCK_FILE and lock.read_text().strip() != str(holder.pid)


def test_the_lock_is_released_when_the_block_ends(tmp_path):
    with hold_run_lock(tmp_path / "run"):
        pass
    with hold_run_lock(tmp_path / "run"):
        pass
