"""Starting a command's process without Python's garbage collector walking its imports again and again.

A command imports a few hundred thousand objects that live as long as its process: the modules, classes and models
of Ray, the MCP SDK, pydantic, pandas. Python's cyclic collector runs whenever 700 more container objects exist than
at its last run, and each time the survivors have grown by a quarter it walks every object there is; while a process
imports, that is most of the time. A gateway spent 0.3 of its 1.7 CPU seconds to ready in the collector, a run's
driver 14% of its own CPU. `collect_less()` raises that first threshold to `YOUNG_OBJECTS`: the collector still runs
and frees every cycle, after 20,000 new objects instead of 700, which holds at most a few MB more garbage for a
moment. Only the command-line entry points and a run's rollout actors (`rollout.run.worker`) call it: a program
that imports rollout keeps its own collector settings.

`run_command(main)` is how every entry point runs its command: the threshold raised, then `main` with the quick exit
(`rollout.quick_exit`). `run_cli(module)` is that for `python -m PACKAGE`: the package's cli module is imported only
then, so its imports are collected less and its exit handlers run before the quick exit, as for `rollout PACKAGE`.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from typing import NoReturn

from rollout.quick_exit import exit_with

YOUNG_OBJECTS = 20_000
"""The collector's first threshold in a command's process (Python's default is 700)."""


def collect_less() -> None:
    """Run the youngest collection only after `YOUNG_OBJECTS` new container objects; the older thresholds stay."""
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(YOUNG_OBJECTS, young), middle, oldest)


def run_command(main: Callable[[], int | None]) -> NoReturn:
    """A command-line entry point's process: `collect_less()`, then `main` and its exit code, without the teardown."""
    collect_less()
    exit_with(main)


def run_cli(module: str) -> NoReturn:
    """`python -m PACKAGE`: `run_command` of the `main()` of `module` (PACKAGE's cli), imported once both are set."""
    run_command(lambda: importlib.import_module(module).main())
