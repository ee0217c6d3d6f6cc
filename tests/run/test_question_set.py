"""`QuestionSet`: the run's questions read from their file on each pass, counted and id-checked once."""

from __future__ import annotations

import json

import pytest

from rollout.data.dataset import QuestionSet
from rollout.data.specs import QuestionSpec
from rollout.errors import DataError


def write(path, ids):
    path.write_text("".join(json.dumps({"id": i, "question": f"q {i}?", "golden_answers": ["a"]}) + "\n" for i in ids))
    return QuestionSpec(path=str(path))


def test_counts_iterates_and_indexes_without_holding_the_questions(tmp_path):
    qs = QuestionSet(write(tmp_path / "q.jsonl", ["a", "b", "c", "d"]), limit=3)
    assert len(qs) == 3 and [q.id for q in qs] == ["a", "b", "c"] and [q.id for q in qs] == ["a", "b", "c"]
    assert qs[1].id == "b" and qs[-1].id == "c" and [q.id for q in qs[1:]] == ["b", "c"]
    with pytest.raises(IndexError):
        qs[3]
    assert len(qs.whole()) == 4


def test_an_id_used_twice_names_both_lines(tmp_path):
    with pytest.raises(DataError, match=r"q\.jsonl:3: id 'b' was already used on line 2"):
        QuestionSet(write(tmp_path / "q.jsonl", ["a", "b", "b"]))
