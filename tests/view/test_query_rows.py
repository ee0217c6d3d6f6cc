"""A task table's rows, kept per query until the run grows: the same rows as computed afresh, new tasks included
once the index has them, whatever a caller does with a list it got."""

from __future__ import annotations

from pathlib import Path

from rollout.records import Question, TaskResult
from rollout.run_folder import append_task, trajectory_path
from rollout.view.index import TrajectoryIndex
from rollout.view.query import KEPT_QUERIES, TableQuery


def _task(i: int, latency: float) -> TaskResult:
    question = Question(f"q{i}", f"question {i}", [f"answer {i}"])
    # A line longer than the head the index hashes: appending leaves that head as it was (the index is extended).
    messages = [{"role": "user", "content": "context " * 600}]
    return TaskResult.answered(question, prediction=f"answer {i}" if i % 2 else "no", turns=1, messages=messages,
                               usage={}, calls=[], events=[], worker_id="w", latency_s=latency)


def test_kept_rows_follow_the_index(tmp_path: Path) -> None:
    file = trajectory_path(tmp_path)
    with file.open("w", encoding="utf-8") as f:
        for i, latency in enumerate((3.0, 1.0, 2.0, 5.0)):
            append_task(f, _task(i, latency))
    index = TrajectoryIndex.load(file)
    slowest_right = TableQuery(right="right", sort="latency_s", desc=True)
    rows = slowest_right.matches(index)
    assert rows == [3, 1]
    rows.append(0)  # the caller's list: what the index keeps is not touched
    assert slowest_right.matches(index) == [3, 1]

    others = [TableQuery(q=f"question {i}") for i in range(KEPT_QUERIES)]  # more queries than are kept
    assert [q.matches(index) for q in others] == [[0], [1], [2], [3], [], [], [], []]
    assert slowest_right.matches(index) == [3, 1] and TableQuery(desc=True).matches(index) == [3, 2, 1, 0]

    with file.open("a", encoding="utf-8") as f:
        append_task(f, _task(4, 9.0))
        append_task(f, _task(5, 4.0))
    assert index.refresh() == 2
    assert slowest_right.matches(index) == [3, 5, 1]
    assert TableQuery(q="question 4").matches(index) == [4] and TableQuery(desc=True).matches(index) == [5, 4, 3, 2, 1, 0]
