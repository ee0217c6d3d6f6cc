"""Compare a sweep's runs when it ends: `python -m rollout -m mode=dense,sparse,hybrid` leaves
comparison.md and comparison.png in the sweep folder.

Registered in conf/config.yaml under `hydra.callbacks`. Hydra calls `on_job_end` after each
job and `on_multirun_end` once after all of them. The run folders are the jobs' `output_dir`s,
in sweep order (so the first mode swept is the baseline); with a launcher that runs jobs in
other processes those calls do not reach this object, and the sweep folder's subfolders holding
a trajectory are compared instead. A job that produced nothing (no task ended ok) wrote its folder
and is compared with the others, its failures counted; the sweep then exits non-zero naming it
(`rollout.run.outcome.sweep_end`). A comparison is a bonus on top of the runs: whatever goes
wrong is logged as a warning and never fails the sweep.

A sweep whose every job was refused (bad input, exit 2) ran nothing, so it leaves the sweep folder's
`multirun.yaml`, which Hydra writes before the first job, as it found it: an earlier sweep's stays, and none is left
where there was none.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rollout.run.outcome import EXIT_BAD_INPUT
from rollout.run.refused import remove_refused_folder
from rollout.run_folder import TRAJECTORY_FILE, is_run_folder

logger = logging.getLogger(__name__)

MULTIRUN_YAML = "multirun.yaml"
"""What Hydra's basic sweeper writes into the sweep folder before the first job: the sweep's config."""


class CompareOnMultirunEnd(Callback):
    """Write the comparison of a sweep's runs into its `hydra.sweep.dir` when two or more finished."""

    def __init__(self, baseline: str | None = None) -> None:
        self.baseline = baseline
        """Mode the others are paired against; None = the first run of the sweep."""
        self._job_dirs: list[Path] = []
        self._codes: list[int | None] = []
        self._multirun_yaml: tuple[Path, bytes | None] | None = None
        """The sweep's multirun.yaml and what it held before the sweep (None: absent), to restore if all refused."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            path = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))) / MULTIRUN_YAML
            self._multirun_yaml = path, path.read_bytes() if path.is_file() else None
        except Exception as e:  # noqa: BLE001 - a sweep folder that cannot be read is Hydra's to report
            logger.debug("could not read the sweep's %s: %s", MULTIRUN_YAML, e)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        self._codes.append(getattr(getattr(job_return, "_return_value", None), "code", None))
        try:
            cfg = getattr(job_return, "cfg", None) or config
            out = OmegaConf.select(cfg, "output_dir")
            if out is not None:
                # Resolved now: with hydra.job.chdir=true a relative path means the job's folder.
                path = Path(str(out)).resolve()
                if path not in self._job_dirs:
                    self._job_dirs.append(path)
        except Exception as e:  # noqa: BLE001 - a missing folder only means a smaller comparison
            logger.debug("could not read this job's output_dir: %s", e)

    def _runs(self, sweep_dir: Path) -> list[Path]:
        if self._job_dirs:
            return [d for d in self._job_dirs if is_run_folder(d)]
        if not sweep_dir.is_dir():
            return []
        return [p for p in sorted(sweep_dir.iterdir()) if is_run_folder(p)]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._codes and all(code == EXIT_BAD_INPUT for code in self._codes):
            self._restore_multirun_yaml()
            return
        try:
            self._compare(config)
        except Exception as e:  # noqa: BLE001 - never fail a sweep whose runs all finished
            logger.warning("comparison of the sweep's runs skipped: %s: %s", type(e).__name__, e)

    def _restore_multirun_yaml(self) -> None:
        if self._multirun_yaml is None:
            return
        path, before = self._multirun_yaml
        try:
            if before is not None:
                path.write_bytes(before)
                return
            path.unlink(missing_ok=True)
            if path.parent.is_dir() and not any(path.parent.iterdir()):
                remove_refused_folder(path.parent)  # and the parents it leaves empty, as a refused run does
        except OSError as e:
            logger.warning("could not restore %s after a refused sweep: %s", path, e)

    def _compare(self, config: DictConfig) -> None:
        where = OmegaConf.select(config, "hydra.sweep.dir", default=None)
        if where is None:
            logger.warning("comparison of the sweep's runs skipped: the config has no hydra.sweep.dir to write it to")
            return
        sweep_dir = Path(str(where)).resolve()
        runs = self._runs(sweep_dir)
        if len(runs) < 2:
            logger.info("%d run(s) with %s in this sweep: nothing to compare", len(runs), TRAJECTORY_FILE)
            return
        # Imported here: Hydra builds this callback before every run, and the comparison's pandas and matplotlib
        # (about a second) are for the end of a sweep only.
        from rollout.report.compare.comparison import compare_runs
        from rollout.report.compare.run_folders import find_runs
        from rollout.report.compare.tables import pair_sentence, write_comparison

        comparison = compare_runs(find_runs(runs), baseline=self.baseline)
        for p in comparison.pairs:
            logger.info("%s", pair_sentence(p))
        written = write_comparison(comparison, sweep_dir)
        logger.info("Comparison of %d runs: %s", len(runs), ", ".join(map(str, written)))
