"""A launched gateway's watch on its parent (rollout.gateway.orphan); the kernel's guard and a whole run killed with
SIGKILL are in tests/harness/test_faults.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from rollout.gateway.orphan import PARENT_PID_ENV, parent_death_hook
from tests.harness.test_faults import wait_until_gone
from tests.test_rollout_command import rollout_command_env

WATCHING = "import time; from rollout.gateway.orphan import watch_parent; watch_parent(0.05); time.sleep(120)"


def test_a_process_whose_launcher_is_no_longer_its_parent_stops_itself():
    env = rollout_command_env({PARENT_PID_ENV: "1"})  # not this child's parent: its launcher counts as gone
    proc = subprocess.Popen([sys.executable, "-c", WATCHING], env=env, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM
    assert "is gone; stopping" in err


def test_without_a_launcher_named_it_keeps_running():
    env = {k: v for k, v in rollout_command_env().items() if k != PARENT_PID_ENV}
    code = "from rollout.gateway.orphan import watch_parent; import threading; watch_parent(0.01); " \
           "print(threading.active_count())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "1"  # no watching thread started


def test_the_kernel_stops_a_child_launched_from_the_main_thread_when_its_parent_is_killed():
    # The parent launches a sleeping child with the hook alone (no watch), prints its pid, then waits for it.
    launcher = ("import subprocess, sys; from rollout.gateway.orphan import parent_death_hook; "
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
                "preexec_fn=parent_death_hook()); print(child.pid, flush=True); child.wait()")
    parent = subprocess.Popen([sys.executable, "-c", launcher], env=rollout_command_env(), stdout=subprocess.PIPE,
                              text=True)
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        assert wait_until_gone([child]) == []
    finally:
        parent.kill()


def test_no_kernel_guard_for_a_child_launched_from_another_thread():
    hooks: list[object] = []
    thread = threading.Thread(target=lambda: hooks.append(parent_death_hook()))
    thread.start()
    thread.join()
    assert hooks == [None]
    assert callable(parent_death_hook())
