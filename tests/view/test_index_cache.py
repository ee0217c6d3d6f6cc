"""The viewer's index read back from its cache is the index built from the trajectory, value for value and type for
type, whatever the columns hold; a cache it cannot read is rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

from rollout.records import Question, TaskResult
from rollout.run_folder import append_task, trajectory_path
from rollout.view.index import INDEX_FILE, TrajectoryIndex


def _task(i: int, *, usage: dict, status: str = "ok") -> TaskResult:
    question = Question(f"q{i}", f"question {i}", [f"answer {i}"], {"gold_doc_ids": ["d1"]})
    if status != "ok":
        return TaskResult.failed(question, status=status, error="boom", usage=usage, latency_s=0.25 * i)
    return TaskResult.answered(question, prediction=f"answer {i}" if i % 2 else "wrong", turns=1, messages=[],
                               usage=usage, calls=[], events=[], worker_id="w", latency_s=0.1 * i)


def _same(a: TrajectoryIndex, b: TrajectoryIndex) -> None:
    assert a.columns.keys() == b.columns.keys()
    for name, values in a.columns.items():
        assert [(type(v), repr(v)) for v in values] == [(type(v), repr(v)) for v in b.columns[name]], name
    assert (a.size, a.lines, a.head, a.duplicates, a.skipped, a.problems) == (b.size, b.lines, b.head, b.duplicates,
                                                                             b.skipped, b.problems)
    assert [a.position(i, r) for i, r in zip(a.columns["id"], a.columns["repeat"], strict=True)] == list(range(len(a)))
    assert [b.position(i, r) for i, r in zip(b.columns["id"], b.columns["repeat"], strict=True)] == list(range(len(b)))


def test_the_cached_index_is_the_built_one(tmp_path: Path) -> None:
    file = trajectory_path(tmp_path)
    with file.open("w", encoding="utf-8") as f:
        append_task(f, _task(0, usage={"total_tokens": 12, "cost_usd": 0.5}))
        append_task(f, _task(1, usage={}))  # no tokens, no cost
        append_task(f, _task(2, usage={"total_tokens": 2**70, "cost_usd": -0.0}))  # an int beyond 64 bits
        append_task(f, _task(3, usage={"total_tokens": 7.5}, status="timeout"))  # tokens a float: a mixed column
        append_task(f, _task(4, usage={"total_tokens": 3}, status="infra_error"))
        f.write("not json\n")
        append_task(f, _task(1, usage={}))  # a duplicate
    built = TrajectoryIndex.load(file, cache=False)
    assert built.columns["tokens"] == [12, None, 2**70, 7.5, 3] and built.columns["em"][3:] == [None, None]
    assert (built.duplicates, built.skipped) == (1, 1)

    TrajectoryIndex.load(file)  # writes the cache
    cached = TrajectoryIndex._from_cache(file)
    assert cached is not None
    _same(built, cached)

    cache = tmp_path / INDEX_FILE
    state = json.loads(cache.read_text(encoding="utf-8"))
    assert isinstance(state["columns"]["latency_s"], dict) and isinstance(state["columns"]["status"], dict)
    state["columns"]["status"]["codes"] = "not base64!"
    cache.write_text(json.dumps(state), encoding="utf-8")
    assert TrajectoryIndex._from_cache(file) is None
    _same(built, TrajectoryIndex.load(file))  # rebuilt, and cached again
    cached = TrajectoryIndex._from_cache(file)
    assert cached is not None
    _same(built, cached)
