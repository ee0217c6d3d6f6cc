"""One log format and one verbosity scale for every rollout process.

The run's driver logs through Hydra's job logging (conf/hydra/job_logging/rollout.yaml builds its
formatter here), the gateway child and `rollout gateway` through `configure_logging`, Ray workers
through `configure_ray_worker`: each line reads `HH:MM:SS LEVEL   logger: message`, on the
console and in the run's rollout.log alike.

`verbose` (`-v`/`-q` on the command line, counted like pip's):

    -1 (-q)    warnings and errors only
     0         rollout at INFO, libraries at WARNING (the default)
     1 (-v)    rollout at DEBUG
     2 (-vv)   libraries at INFO too, and their progress bars even when stderr is not a terminal
     3 (-vvv)  libraries at DEBUG

Libraries' progress bars (transformers' "Loading weights", the encoder's "encoding", datasets'
"Map", ...) draw only when stderr is a terminal: in a pipe or a file each redraw is a line of
noise. The run's own progress bar follows `progress=` (rollout.view.progress), not this.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from rollout.errors import ConfigError

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"

QUIET, DEFAULT = -1, 0
MOST = 3
"""Verbosity past which nothing more is shown."""

OWN_LOGGERS = ("rollout", "envs")
"""Loggers of this project."""
LIBRARY_LOGGERS = (
    "bm25s", "sentence_transformers", "transformers", "huggingface_hub", "datasets", "tokenizers", "torch",
    "onnxruntime", "faiss", "numba", "httpx", "httpx2", "httpcore", "openai", "mcp", "uvicorn", "sse_starlette",
    "ray", "filelock", "urllib3", "fsspec", "asyncio", "matplotlib", "PIL",
)
"""Libraries' loggers set by name: some set a level of their own on import (bm25s DEBUG, ray INFO), which the
root logger's level would not override. Any other library inherits the root logger's level."""

RAY_WORKER_SETUP_HOOK = "rollout.logs.configure_ray_worker"
"""Ray's `worker_process_setup_hook` for a run's workers."""
VERBOSE_ENV = "ROLLOUT_VERBOSE"
"""How the driver hands its verbosity to the Ray workers it starts (read by `configure_ray_worker`)."""
_BARS_OFF_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
"""Set to 1 when progress bars are off: read by tqdm, huggingface_hub (and so transformers) and datasets when
they are imported, in this process and in the processes it starts."""


@dataclass(frozen=True, slots=True)
class Levels:
    """The logging levels one verbosity stands for."""

    own: int
    """rollout's (and envs') loggers."""
    libraries: int
    """Every other logger."""


def levels(verbose: int) -> Levels:
    """The levels of `verbose` (below -1 is -1, above 3 is 3)."""
    verbose = max(QUIET, min(MOST, verbose))
    own = {QUIET: logging.WARNING, DEFAULT: logging.INFO}.get(verbose, logging.DEBUG)
    libraries = {2: logging.INFO, 3: logging.DEBUG}.get(verbose, logging.WARNING)
    return Levels(own, libraries)


def parse_verbose(value: Any) -> int:
    """`verbose=` as given in a config: a whole number (booleans and text are refused, naming the choices)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"verbose={value!r} is not a whole number: give -1 (warnings only), 0 (default), 1, 2 or 3, "
                      "or -q / -v / -vv / -vvv on the command line")


def library_progress_bars(verbose: int, *, terminal: bool) -> bool:
    """Whether libraries may draw progress bars: on a terminal unless quiet, anywhere from -vv on."""
    return verbose >= 2 or (terminal and verbose > QUIET)


def formatter() -> logging.Formatter:
    """The one format (Hydra's job logging builds it through `()`: rollout.logs.formatter)."""
    return logging.Formatter(LOG_FORMAT, DATE_FORMAT)


def stderr_is_terminal() -> bool:
    return sys.stderr is not None and sys.stderr.isatty()


def configure_logging(verbose: int) -> None:
    """For a process whose logging is ours to set (the gateway child, a Ray worker): one handler on the root
    logger, to stderr in the one format, then `apply_verbosity`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter())
    logging.basicConfig(handlers=[handler], force=True)
    apply_verbosity(verbose)


def apply_verbosity(verbose: int, *, terminal: bool | None = None) -> None:
    """Set the loggers' levels and the libraries' progress bars for `verbose`; leaves handlers to whoever made them.

    `terminal` (default: whether stderr is one) decides the progress bars. Python warnings go through logging
    (logger `py.warnings`), so they read like every other line."""
    lv = levels(verbose)
    logging.getLogger().setLevel(lv.libraries)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(lv.libraries)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(lv.own)
    _adopt_library_handlers()
    logging.captureWarnings(True)
    terminal = stderr_is_terminal() if terminal is None else terminal
    if not terminal:
        # Ray colours the prefix of the lines it forwards from workers unless told not to: escape codes in a file.
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    set_library_progress_bars(library_progress_bars(verbose, terminal=terminal))


def _adopt_library_handlers() -> None:
    """Libraries imported so far that print through a handler of their own (ray; transformers, datasets and
    huggingface_hub once imported) print through the root logger's instead, in the one format."""
    if not logging.getLogger().handlers:
        return
    for name in ("ray", "transformers", "datasets", "huggingface_hub"):
        if name in sys.modules:
            _through_root(logging.getLogger(name))


def _through_root(logger: logging.Logger) -> None:
    """`logger` prints through the root logger's handler, not one of its own."""
    logger.handlers.clear()
    logger.propagate = True


def adopt_serve_logger() -> None:
    """Ray Serve's logger in this process ("ray.serve", given a handler, a format and INFO of its own when `ray.serve`
    is imported) prints through the root logger's handler instead, in the one format, at the level of `ray`."""
    if not logging.getLogger().handlers:
        return
    logger = logging.getLogger("ray.serve")
    _through_root(logger)
    logger.setLevel(logging.NOTSET)


class _RayDataToRoot(logging.Handler):
    """In place of Ray Data's console handler: its records at the level `ray` is set to go to the root logger's
    handlers, except those Ray Data keeps off consoles (`hide`: a failed dataset's full stack trace)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "hide", False) or record.levelno < logging.getLogger("ray").getEffectiveLevel():
            return
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def adopt_ray_data_logger() -> None:
    """Ray Data's logger ("ray.data", given a console handler in Ray's format when `ray.data` is imported) prints
    through the root logger's handlers instead, in the one format, at the level of `ray` (idempotent).

    Its handlers that write Ray Data's own log files in Ray's session folder stay."""
    if not logging.getLogger().handlers:
        return
    logger = logging.getLogger("ray.data")
    for handler in list(logger.handlers):
        if isinstance(handler, _RayDataToRoot) or (isinstance(handler, logging.StreamHandler)
                                                   and not isinstance(handler, logging.FileHandler)):
            logger.removeHandler(handler)
    logger.addHandler(_RayDataToRoot())


def set_library_progress_bars(on: bool) -> None:
    """Turn the libraries' progress bars off, in this process and in the processes it starts; `on` changes nothing
    (they draw by default, and a user's own `TQDM_DISABLE=1` stays).

    Off sets the variables tqdm, huggingface_hub (and so transformers) and datasets read when they are
    imported, here and in child processes, and turns the switches of those already imported. rollout's own
    calls into libraries ask `library_progress_bars_on()`."""
    if on:
        return
    for name in _BARS_OFF_ENV:
        os.environ[name] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils.logging import disable_progress_bar

        disable_progress_bar()
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()


def library_progress_bars_on() -> bool:
    """Whether rollout's own calls into libraries (the dense encoder's "encoding" bar) may show a bar."""
    return os.environ.get("TQDM_DISABLE", "").lower() not in ("1", "true", "yes")


def verbosity_flags(verbose: int) -> list[str]:
    """`verbose` as the command-line flags that give it: `["-vv"]`, `["-q"]`, `[]` for the default."""
    if verbose == DEFAULT:
        return []
    return ["-" + ("v" * verbose if verbose > 0 else "q" * -verbose)]


def add_verbosity_options(parser: argparse.ArgumentParser) -> None:
    """`-v`/`-q` on an argparse command; `verbosity(args)` reads them."""
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log detail: -v rollout's debug lines, -vv libraries' too (and their progress bars)")
    parser.add_argument("-q", "--quiet", action="count", default=0, help="only warnings and errors")


def verbosity(args: argparse.Namespace) -> int:
    return int(args.verbose) - int(args.quiet)


def ray_worker_env(verbose: int) -> dict[str, str]:
    """Environment for Ray workers so `configure_ray_worker` gives them the driver's verbosity."""
    return {VERBOSE_ENV: str(verbose)}


def configure_ray_worker() -> None:
    """Ray's `worker_process_setup_hook`: the one format and the driver's verbosity in each worker.

    A worker's stderr is a file Ray forwards line by line, so libraries draw no progress bars there (until -vv)."""
    configure_logging(int(os.environ.get(VERBOSE_ENV, DEFAULT)))
