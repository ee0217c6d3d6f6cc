"""The run folders a comparison is of, and their names: `report compare`, the viewer and the judge find runs alike.

A folder holding trajectory.jsonl is a run; any other folder stands for its subfolders that are runs. Each run is
named by its mode and telling overrides (`rollout.report.tool_calls.ledger.run_labels`), and by its folder where two runs still
share a name.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rollout.errors import NotARunFolderError
from rollout.report.tool_calls.ledger import run_labels
from rollout.run_folder import TRAJECTORY_FILE, is_run_folder


def find_runs(paths: Sequence[Path | str]) -> list[Path]:
    """Run folders named by `paths`: a folder with trajectory.jsonl is a run; any other folder
    stands for its subfolders that are runs (sorted by name), e.g. results/demo → its modes."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise NotARunFolderError(
                f"{path}: no such folder; pass run folders such as results/<experiment>/<mode>, or their parent"
            )
        if is_run_folder(path):
            runs = [path]
        else:
            runs = sorted((p for p in path.iterdir() if p.is_dir() and is_run_folder(p)), key=lambda p: p.name)
        if not runs:
            raise NotARunFolderError(
                f"{path}: no {TRAJECTORY_FILE} here or in its subfolders; run `python -m rollout mode=<mode>` "
                "to make a run folder, or pass one such as results/<experiment>/<mode>"
            )
        found += [r for r in runs if r.resolve() not in {f.resolve() for f in found}]
    return found


def distinct_labels(runs: list[Path], root: Path | None = None) -> list[str]:
    """Each run's name in a comparison: its mode and telling overrides, and where two runs still share one, their
    folders under `root` (default: the folder holding them all)."""
    root = common_parent(runs) if root is None else root
    modes = run_labels(runs)  # the mode, plus the overrides that tell the runs apart
    counts = Counter(modes)

    def where(run: Path) -> str:
        try:
            return str(run.resolve().relative_to(root.resolve()))
        except ValueError:
            return str(run)

    return [m if counts[m] == 1 else f"{m} ({where(r)})" for m, r in zip(modes, runs, strict=True)]


def common_parent(runs: Sequence[Path]) -> Path:
    """The deepest folder holding every run folder (where comparison files go by default)."""
    return Path(os.path.commonpath([str(Path(r).resolve().parent) for r in runs]))
