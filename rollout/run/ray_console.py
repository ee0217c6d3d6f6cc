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
nothing a run's user can act on: `quiet_token_notice` keeps it out of the run's log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

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


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TOKEN_NOTICE)


def quiet_token_notice() -> None:
    """Keep Ray's notice that it enabled token authentication out of the run's log (idempotent)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if not any(isinstance(f, _DropTokenNotice) for f in logger.filters):
        logger.addFilter(_DropTokenNotice())
