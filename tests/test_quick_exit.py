"""The command-line entry points end their process with `os._exit` once every other exit handler has run, keeping
the exit code `sys.exit` would give and everything written to the log and the streams."""

import os
import subprocess
import sys

import pytest

from rollout.paths import PROJECT_ROOT

PROGRAM = """
import atexit, logging, sys
from rollout.quick_exit import exit_with

def main():
    handler = logging.FileHandler(sys.argv[2])
    logging.getLogger().addHandler(handler)
    logging.getLogger().warning("logged before the exit")
    atexit.register(lambda: print("a later exit handler ran", flush=True))  # registered after the quick exit's
    print("buffered, not flushed", end="")
    {body}

exit_with(main)
"""


@pytest.mark.parametrize(("body", "code"), [
    ("return 0", 0), ("return None", 0), ("return 3", 3), ("sys.exit(2)", 2), ("sys.exit('refused')", 1),
    ("raise RuntimeError('boom')", 1), ("raise KeyboardInterrupt", 130),
])
def test_the_exit_code_and_every_written_line_are_kept(tmp_path, body: str, code: int):
    log = tmp_path / "run.log"
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(body=body), "x", str(log)], check=False, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith("buffered, not flushed") and "a later exit handler ran" in done.stdout
    assert log.read_text() == "logged before the exit\n"
    if "refused" in body:
        assert "refused" in done.stderr
    if "boom" in body:
        assert "RuntimeError: boom" in done.stderr
