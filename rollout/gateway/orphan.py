"""A gateway launched for a run ends with the process that launched it, even one killed with SIGKILL.

Two guards, both set up by `GatewayProcess`: on Linux the kernel sends the child SIGTERM when its parent dies
(`prctl(PR_SET_PDEATHSIG)`, set between fork and exec: `parent_death_hook`); and the child watches its parent's
pid (`watch_parent`, started by `python -m rollout.gateway` when `PARENT_PID_ENV` names one), which also covers a
child started from a thread that ends before the run does (the kernel's signal follows the parent *thread*) and
systems without prctl. A gateway a user starts on its own has neither and serves until stopped.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

PARENT_PID_ENV = "ROLLOUT_GATEWAY_PARENT_PID"
"""The pid of the process that launched the gateway; the gateway stops once it is no longer its parent."""
WATCH_INTERVAL_S = 1.0
"""How often the gateway checks that its parent still runs."""
_PR_SET_PDEATHSIG = 1


def parent_death_hook() -> Callable[[], None] | None:
    """The `preexec_fn` to launch the gateway with from this thread (None: no kernel guard, the watch alone).

    On Linux, from the main thread: a function that asks the kernel to send the child SIGTERM when this process
    dies. libc is looked up here, before the fork, so the child only makes the one call (no lock another thread
    may hold). From any other thread, None: the kernel's signal follows the thread that forked, so a child
    launched from a thread that ends (a restart) would be stopped with it."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    term = int(signal.SIGTERM)

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, term, 0, 0, 0)

    return die_with_parent


def watch_parent(interval_s: float = WATCH_INTERVAL_S) -> None:
    """In the gateway: when `PARENT_PID_ENV` is set, stop (SIGTERM to itself, so the report is written) once that
    process is no longer this one's parent. Returns at once; the watch runs on a daemon thread."""
    value = os.environ.get(PARENT_PID_ENV, "")
    if not value.isdigit():
        return
    parent = int(value)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        logger.warning("The process that launched this gateway (pid %d) is gone; stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="gateway-parent-watch", daemon=True).start()
