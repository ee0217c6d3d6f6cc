"""Starting a command's process without Python's garbage collector walking its imports again and again.

A command imports a few hundred thousand objects that live as long as its process: the modules, classes and models
of Ray, the MCP SDK, pydantic, pandas. Python's cyclic collector runs whenever 700 more container objects exist than
at its last run, and each time the survivors have grown by a quarter it walks every object there is; while a process
imports, that is most of the time. A gateway spent 0.3 of its 1.7 CPU seconds to ready in the collector, a run's
driver 14% of its own CPU. `collect_less()` raises that first threshold to `YOUNG_OBJECTS`: the collector still runs
and frees every cycle, after 20,000 new objects instead of 700, which holds at most a few MB more garbage for a
moment. Only the command-line entry points and a run's rollout actors (`rollout.run.worker`) call it: a program
that imports rollout keeps its own collector settings.
"""

from __future__ import annotations

import gc

YOUNG_OBJECTS = 20_000
"""The collector's first threshold in a command's process (Python's default is 700)."""


def collect_less() -> None:
    """Run the youngest collection only after `YOUNG_OBJECTS` new container objects; the older thresholds stay."""
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(YOUNG_OBJECTS, young), middle, oldest)
