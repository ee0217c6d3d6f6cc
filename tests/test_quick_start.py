"""A command's process runs Python's garbage collector after `YOUNG_OBJECTS` new objects, set before the command's
imports, and ends without the interpreter's teardown (`rollout.quick_exit`); a program that only imports rollout
keeps its own collector settings."""

import gc
import os
import subprocess
import sys

from rollout.paths import PROJECT_ROOT
from rollout.quick_start import YOUNG_OBJECTS, collect_less

# It prints the first threshold of a fresh process: Python's own, after importing what a program would, and
# after `python -m rollout.gateway --help` (whose module raises it before importing the gateway). An exit handler
# registered before the command's quick exit would run after it: never, as the process ends at once.
PROGRAM = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("the interpreter's teardown ran", file=sys.stderr))
print("threshold", gc.get_threshold()[0], file=sys.stderr)
import rollout, rollout.cli, rollout.gateway.cli, rollout.run.driver, rollout.run.worker
print("threshold", gc.get_threshold()[0], file=sys.stderr)
sys.argv = ["python -m rollout.gateway", "--help"]
try:
    runpy.run_module("rollout.gateway", run_name="__main__")
except SystemExit:
    pass
print("threshold", gc.get_threshold()[0], file=sys.stderr)
"""


def test_only_the_entry_points_raise_the_threshold_and_end_at_once():
    done = subprocess.run([sys.executable, "-c", PROGRAM], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == 0, done.stderr
    python_s, imported, gateway = (int(line.split()[1]) for line in done.stderr.splitlines()
                                   if line.startswith("threshold "))
    assert imported == python_s < YOUNG_OBJECTS
    assert gateway == YOUNG_OBJECTS
    assert "teardown ran" not in done.stderr


def test_the_older_thresholds_stay_and_a_higher_first_one_is_kept():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 5, 7)
        collect_less()
        assert gc.get_threshold() == (YOUNG_OBJECTS, 5, 7)
        gc.set_threshold(YOUNG_OBJECTS * 2, 5, 7)
        collect_less()
        assert gc.get_threshold() == (YOUNG_OBJECTS * 2, 5, 7)
    finally:
        gc.set_threshold(*before)
