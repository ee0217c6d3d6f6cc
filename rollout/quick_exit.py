"""Ending a command's process as soon as its work is done, without the interpreter's teardown.

Once a run has printed its summary and stopped Ray and its gateway, Python's own shutdown still takes about a
second here: it tears down every module (Ray's, pandas', the MCP SDK's) and their objects one by one, and nothing the
user waits for comes of it. A gateway's took 0.75 s (0.6 CPU s) after its report was written, at the end of every
run that launched it. `exit_with(main)` registers, before anything else does, an exit handler that runs last:
it flushes the log and the standard streams and ends the process with `os._exit`, keeping the exit code. Every other
exit handler (Ray's shutdown among them) has run by then. Only the command-line entry points use it; `main`
functions called from Python (tests, scripts) exit as they always did.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_with(main: Callable[[], int | None]) -> NoReturn:
    """Run `main` and exit with its code (or the code of a `SystemExit` it raised), skipping the teardown."""
    code = 1  # an exception escaping `main` ends the process with 1, as Python's own exit would
    atexit.register(lambda: _end(code))  # the first registered runs last
    try:
        returned: object = main()
    except SystemExit as e:
        returned = e.code
    except KeyboardInterrupt:
        code = 130  # what a shell reports for a process Ctrl-C ended (128 + SIGINT), as Python's own exit gives
        raise
    # sys.exit's rule: None is 0, an int itself, anything else is printed and exits 1.
    code = 0 if returned is None else returned if isinstance(returned, int) else 1
    sys.exit(returned)


def _end(code: int) -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to keep
            pass
    os._exit(code)
