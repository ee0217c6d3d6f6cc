"""Whole runs of a small demo knowledge base, made once per test session and shared by the tests that read them.

A whole run starts a gateway process and Ray actors: seconds each. Tests that only read a run's folder (its
trajectory, summary, tool stats, config) or what it streamed ask the `demo_runs` fixture for the run of a mode
instead of making their own; the first to ask makes it, the others reuse it. A test that writes into a run
folder copies it first (`shutil.copytree(demo_runs[mode], tmp_path / "run")`).

Under pytest-xdist the workers of a session share the runs' folder: the first worker to ask for a run makes it
while holding a lock on it, and a worker that asks meanwhile waits, then reads what the run streamed from disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rollout.records import TaskResult
from rollout.run.config import compose_run_config
from rollout.run.outcome import RunOutcome
from rollout.run.stream import TaskEvent, run_with_events

SMALL_KB = ("dataset.n_passages=400", "dataset.n_questions=40")
"""The knowledge base of every shared run: 40 questions over 400 passages."""

WORKERS = {"hybrid": ("workers=2", "concurrency_per_worker=4")}
"""The hybrid run is the demo as a user runs it, on two actors. The other modes' checks are about their tools and
results, so they run on one actor with as many tasks at once (ONE_WORKER): an actor less is a second of CPU a run."""
ONE_WORKER = ("workers=1", "concurrency_per_worker=8")

Streamed = TaskEvent | TaskResult | RunOutcome


@dataclass(frozen=True, slots=True)
class DemoRun:
    """One finished run: its folder, and everything `run_with_events` yielded, in order."""

    folder: Path
    streamed: list[Streamed]
    """Each task's events and its record as they happened; the `RunOutcome` last."""

    @property
    def outcome(self) -> RunOutcome:
        last = self.streamed[-1]
        assert isinstance(last, RunOutcome)
        return last


class DemoRuns:
    """The session's shared runs, keyed by mode and extra overrides; each is made on first use.

    `start_ray` is called before making a run (a worker that only reads runs made elsewhere starts no Ray).
    """

    def __init__(self, root: Path, cache_dir: Path, start_ray: Callable[[], None]) -> None:
        self._root = root
        self._cache_dir = cache_dir
        self._start_ray = start_ray
        self._runs: dict[tuple[str, ...], DemoRun] = {}

    def get(self, mode: str, *overrides: str) -> DemoRun:
        """The run of `mode=MODE` on SMALL_KB with `overrides` (Hydra `key=value`), made now if not yet."""
        key = (mode, *overrides)
        if key not in self._runs:
            # Override values may hold what Hydra would parse in a path (= and ,): the folder is named by a hash.
            name = f"{mode}-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]}"
            self._runs[key] = self._made_once(name, key)
        return self._runs[key]

    def __getitem__(self, mode: str) -> Path:
        """The folder of the run of `mode` with no extra overrides."""
        return self.get(mode).folder

    def _made_once(self, name: str, key: tuple[str, ...]) -> DemoRun:
        folder, saved = self._root / name, self._root / f"{name}.streamed.pickle"
        with locked(self._root / f"{name}.lock"):
            if saved.is_file():
                return DemoRun(folder, pickle.loads(saved.read_bytes()))
            self._start_ray()
            mode, *overrides = key
            cfg = compose_run_config(f"mode={mode}", *SMALL_KB, *WORKERS.get(mode, ONE_WORKER), *overrides,
                                     f"output_dir={folder}", f"cache_dir={self._cache_dir}")
            streamed = list(run_with_events(cfg))
            fd, tmp = tempfile.mkstemp(prefix=f".{saved.name}.", dir=self._root)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(streamed, f)
            os.replace(tmp, saved)
            return DemoRun(folder, streamed)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (a session's workers); the system drops it if its holder dies."""
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
