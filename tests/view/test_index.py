"""The viewer's index of a trajectory: built once, cached beside the run, extended as the run appends, rebuilt
when the run starts over; lines that are not tasks are named, a repeated task counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout.view import index as index_module
from rollout.view.index import INDEX_FILE, TrajectoryIndex
from tests.view.made_runs import task, write_run


def _run(tmp_path: Path, n: int = 3) -> Path:
    return write_run(tmp_path / "run", [task(f"q{i}", f"question {i}?", "yes", "yes" if i % 2 else "no")
                                        for i in range(n)]) / "trajectory.jsonl"


def test_the_index_reads_each_task_at_its_offset_and_scores_it(tmp_path: Path) -> None:
    file = _run(tmp_path)
    index = TrajectoryIndex.load(file)
    assert index.columns["id"] == ["q0", "q1", "q2"] and index.columns["em"] == [0.0, 1.0, 0.0]
    assert index.columns["tools"] == ["query_knowledge_base_dense"] * 3 and index.columns["recall"] == [1.0] * 3
    assert index.read_task(1).prediction == "yes" and index.position("q2") == 2 and index.position("q9") is None
    assert (file.parent / INDEX_FILE).is_file()


def test_a_second_load_reads_the_cache_and_only_the_lines_appended_since(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    file = _run(tmp_path)
    TrajectoryIndex.load(file)
    parsed: list[str] = []
    real_row = index_module._row

    def counting_row(data: dict) -> dict:
        parsed.append(data["id"])
        return real_row(data)

    monkeypatch.setattr(index_module, "_row", counting_row)
    assert len(TrajectoryIndex.load(file)) == 3 and parsed == []
    write_run(file.parent, [task("q3", "question 3?", "yes", "yes")])
    with file.open("a") as f:
        f.write('{"id": "q4", "question": "half-writ')  # the driver is still writing this one
    index = TrajectoryIndex.load(file)
    assert parsed == ["q3"] and index.columns["id"][-1] == "q3" and len(index) == 4


def test_a_run_that_started_over_is_indexed_again(tmp_path: Path) -> None:
    file = _run(tmp_path, n=3)
    TrajectoryIndex.load(file)
    file.unlink()
    write_run(file.parent, [task(f"new{i}", "again?", "a", "a") for i in range(5)])  # longer than before
    assert TrajectoryIndex.load(file).columns["id"] == [f"new{i}" for i in range(5)]


def test_lines_that_are_not_tasks_are_named_and_a_repeated_task_is_kept_once(tmp_path: Path) -> None:
    file = _run(tmp_path, n=2)
    first = file.read_text().splitlines()[0]
    with file.open("a") as f:
        f.write("not json\n[1, 2]\n" + first.replace('"prediction": "no"', '"prediction": "yes"') + "\n")
    index = TrajectoryIndex.load(file)
    assert index.columns["id"] == ["q0", "q1"] and index.columns["prediction"][0] == "no"  # the first line of q0
    assert index.duplicates == 1 and index.skipped == 2
    assert index.problems[0].startswith(f"{file}:3: ") and index.problems[1].startswith(f"{file}:4: ")


def test_a_cache_of_another_format_or_a_folder_that_cannot_be_written_costs_only_a_rebuild(tmp_path: Path) -> None:
    file = _run(tmp_path)
    (file.parent / INDEX_FILE).write_text(json.dumps({"format": -1, "columns": {}}))
    assert len(TrajectoryIndex.load(file)) == 3
    assert json.loads((file.parent / INDEX_FILE).read_text())["format"] == index_module.FORMAT
    (file.parent / INDEX_FILE).unlink()
    file.parent.chmod(0o555)
    try:
        assert len(TrajectoryIndex.load(file)) == 3
    finally:
        file.parent.chmod(0o755)
