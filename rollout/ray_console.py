"""What Ray puts into a run's console: the workers' lines in the run's one format, and none of Ray's decorations.

Ray forwards what each worker prints to the driver and, by default, writes it to the driver's stdout/stderr with a
"(RolloutWorker pid=683) " prefix, colour codes, and "[repeated 2x across cluster]" notes of its deduplication. A
run's workers log in the run's format already (`rollout.logs.configure_ray_worker`); `forward_worker_logs` takes
Ray's printer off and logs each forwarded line through the driver's logging instead, so it reaches the console and
rollout.log alike, as `HH:MM:SS LEVEL logger: [worker-0] message`. A line a worker printed in no format (a print,
a library's own output) is logged under `rollout.run.worker`; the lines after a logged line that are not in the
format (a traceback) stay with it. A line in Ray Serve's own format (its controller's, its proxy's) is logged under
`ray.serve` at its level. The errors Ray pushes to the driver (a worker that died, a task Ray retries),
which Ray prints to stdout as "(raylet) ..." past any printer, are logged the same way, as warnings of logger `ray`.

Ray's "Token authentication is enabled for this Ray cluster" warning (a token in ~/.ray, no RAY_AUTH_MODE) says
nothing a run's user can act on: `quiet_token_notice` keeps it out of the run's log (`quiet_notice` any other such).

Ray's C++ core worker in the driver writes its errors straight to file descriptor 2, past Python's logging, as
"[2026-11-29 06:23:10,931 E 14126 14126] core_worker.cc:2465: ...". Within `native_lines_logged()` descriptor 2 is a
pipe: each such line is logged under `ray` at its level (a few routine ones, `NATIVE_NOTICES`, at INFO), any other
byte goes on to stderr unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

import ray._private.worker
from ray._private.ray_logging import global_worker_stdstream_dispatcher

RAY_PRINTER = "ray_print_logs"
"""The name Ray's own printer of forwarded lines has in its dispatcher."""
FORWARDER = "rollout_worker_logs"
"""The name of ours."""
WORKER_LOGGER = "rollout.run.worker"
"""The logger of a forwarded line in no format."""
_FORMATTED = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +([^\s:]+): (.*)", re.DOTALL)
"""A line in the one format (rollout.logs.LOG_FORMAT): its level, logger and message."""
_SERVE_FORMATTED = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} .*? -- (.*)",
                              re.DOTALL)
"""A line in Ray Serve's format (its controller's, its proxy's): its level and message, logged under `ray.serve`."""
TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


def forward_worker_logs() -> None:
    """Log the lines Ray forwards from workers, and the errors it pushes to the driver, through this process's
    logging, not Ray's printer (idempotent)."""
    global_worker_stdstream_dispatcher.remove_handler(RAY_PRINTER)
    global_worker_stdstream_dispatcher.remove_handler(FORWARDER)
    global_worker_stdstream_dispatcher.add_handler(FORWARDER, log_batch)
    # The driver's thread that prints the errors Ray pushes to it calls this module function by name.
    ray._private.worker.print_to_stdstream = _log_pushed_error


def _log_pushed_error(data: dict[str, Any], ignore_prefix: bool = False) -> None:
    """In place of Ray's `print_to_stdstream`: the batch goes to the run's log, not to stdout."""
    log_batch(data)


def log_batch(batch: dict[str, Any]) -> None:
    """Log one batch Ray forwarded (`lines` of one process, `actor_name` or `task_name`, `pid`, `is_err`)."""
    for name, level, message in records(batch):
        logging.getLogger(name).log(level, "%s", message)


def records(batch: dict[str, Any]) -> Iterator[tuple[str, int, str]]:
    """The (logger, level, message) of each record in a forwarded batch, the message led by the worker's name."""
    pid = batch.get("pid")
    if pid == "autoscaler":
        return  # cluster events of an autoscaling cluster, not a worker's; `ray status` shows them
    who = batch.get("actor_name") or batch.get("task_name") or ("raylet" if pid == "raylet" else f"pid {pid}")
    # The raylet's lines and the errors Ray pushes to the driver (all under pid "raylet") are warnings
    unformatted = logging.WARNING if batch.get("is_err") or pid == "raylet" else logging.INFO
    current: tuple[str, int, str] | None = None  # the record the lines so far belong to
    for line in batch.get("lines", []):
        if (parsed := _logged(line)) is not None:
            if current is not None:
                yield current
            name, level, message = parsed
            current = (name, logging.getLevelName(level), f"[{who}] {message}")
        elif current is not None and line.strip():
            current = (current[0], current[1], f"{current[2]}\n{line}")
        elif line.strip():
            yield WORKER_LOGGER if pid != "raylet" else "ray", unformatted, f"[{who}] {line}"
    if current is not None:
        yield current


def _logged(line: str) -> tuple[str, str, str] | None:
    """The logger, level name and message of a line in the one format or in Ray Serve's; None for any other line."""
    if (m := _FORMATTED.fullmatch(line)) is not None:
        return m.group(2), m.group(1), m.group(3)
    if (m := _SERVE_FORMATTED.fullmatch(line)) is not None:
        return "ray.serve", m.group(1), m.group(2)
    return None


class _DropNotice(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_notice(logger_name: str, prefix: str) -> None:
    """Keep the records of `logger_name` whose message starts with `prefix` out of the log (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, _DropNotice) and f.prefix == prefix for f in logger.filters):
        logger.addFilter(_DropNotice(prefix))


def quiet_token_notice() -> None:
    """Keep Ray's notice that it enabled token authentication out of the run's log (idempotent)."""
    quiet_notice(TOKEN_LOGGER, TOKEN_NOTICE)


_NATIVE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ ([DIWEF]) \d+ \d+\] (.*)")
"""A line of Ray's C++ logging: its severity letter and message ("core_worker.cc:2465: ...")."""
_NATIVE_LEVELS = {"D": logging.DEBUG, "I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR,
                  "F": logging.CRITICAL}
NATIVE_NOTICES = {
    # Ray Data starts its actors with their arguments in the object store of the driver, which outlives them.
    "has constructor arguments in the object store": logging.INFO,
}
"""Routine C++ lines Ray writes as errors (a part of their message), and the level they are logged at."""


def native_record(line: str) -> tuple[int, str] | None:
    """The level and message of a line of Ray's C++ logging; None for any other line."""
    if (m := _NATIVE.fullmatch(line.rstrip("\r\n"))) is None:
        return None
    message = m.group(2)
    level = next((lv for part, lv in NATIVE_NOTICES.items() if part in message), _NATIVE_LEVELS[m.group(1)])
    return level, message


@contextlib.contextmanager
def native_lines_logged() -> Iterator[None]:
    """Within: what C++ code writes to file descriptor 2 passes through a pipe, where Ray's log lines are logged under
    `ray` and the rest goes on to stderr as it came.

    Python's own writes (sys.stderr, the handlers that wrote to it) go to stderr directly meanwhile: the thread that
    reads the pipe logs, and must never wait on the pipe it drains."""
    sys.stderr.flush()
    saved = os.dup(2)
    stderr = open(saved, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    moved = _handlers_on_fd2()
    for handler in moved:
        handler.setStream(stderr)
    python_stderr, sys.stderr = sys.stderr, stderr
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    relay = threading.Thread(target=_relay, args=(read_end, saved), name="ray-native-stderr", daemon=True)
    relay.start()
    try:
        yield
    finally:
        os.dup2(saved, 2)  # the pipe's last write end closes (a child started meanwhile may hold another)
        relay.join(timeout=5)
        sys.stderr = python_stderr
        for handler, stream in moved.items():
            handler.setStream(stream)
        stderr.flush()
        if not relay.is_alive():  # else it relays that child's lines until the process ends
            os.close(read_end)
            os.close(saved)


def _handlers_on_fd2() -> dict[logging.StreamHandler, IO[str]]:
    """The stream handlers of any logger that write to file descriptor 2, with their streams."""
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    found = {}
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                with contextlib.suppress(AttributeError, OSError, ValueError):  # a stream with no descriptor
                    if handler.stream.fileno() == 2:
                        found[handler] = handler.stream
    return found


def _relay(read_end: int, out: int) -> None:
    """Read the pipe until its write ends close: Ray's lines logged, the rest written to `out` as it came."""
    pending = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _relay_line(line + b"\n", out)
            if pending and not pending.startswith(b"["):  # a part line that is no log line (a bar redrawn)
                _write(out, pending)
                pending = b""
        if pending:
            _relay_line(pending, out)


def _relay_line(line: bytes, out: int) -> None:
    if (record := native_record(line.decode("utf-8", "replace"))) is not None:
        logging.getLogger("ray").log(record[0], "%s", record[1])
    else:
        _write(out, line)


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]
