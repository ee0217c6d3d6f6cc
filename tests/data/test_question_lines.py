"""A question line that cannot be read: refused with its file and line, or skipped and counted once on request."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rollout.data import load_question_spec
from rollout.data.dataset import QuestionSet
from rollout.data.specs import QuestionSpec
from rollout.errors import DataError

GOOD = [{"id": f"q{i}", "question": f"Q{i}?", "golden_answers": ["a"]} for i in range(15)]


def _questions(path: Path, missing_answers_at: int = 8) -> Path:
    rows = [dict(r) for r in GOOD]
    del rows[missing_answers_at - 1]["golden_answers"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_line_missing_a_field_refuses_the_file_naming_the_line_the_field_and_both_fixes(tmp_path: Path):
    path = _questions(tmp_path / "qa.jsonl")
    with pytest.raises(DataError) as e:
        load_question_spec(QuestionSpec(path=str(path)))
    message = str(e.value)
    assert f"{path}:8: no 'golden_answers' field" in message and "got None" not in message
    assert "dataset.questions.columns.golden_answers=" in message
    assert "dataset.questions.skip_bad_lines=true" in message
    assert "\n" not in message


def test_a_mapped_column_is_named_as_the_source_spells_it(tmp_path: Path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Q?", "golden_answers": ["x"]}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"qa\.jsonl:1: no 'answers' field"):
        load_question_spec(QuestionSpec(path=str(path), columns={"golden_answers": "answers"}))


def test_the_refusal_reaches_a_run_before_it_starts(tmp_path: Path):
    with pytest.raises(DataError, match="qa.jsonl:8"):
        QuestionSet(QuestionSpec(path=str(_questions(tmp_path / "qa.jsonl"))))


def test_skip_bad_lines_skips_and_counts_them_warning_once_over_every_pass(tmp_path: Path, caplog):
    spec = QuestionSpec(path=str(_questions(tmp_path / "qa.jsonl")), skip_bad_lines=True)
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        questions = QuestionSet(spec, limit=14)
        assert len(questions) == 14 and len(list(questions)) == 14 and len(list(questions.whole())) == 14
    lines = [r.getMessage() for r in caplog.records]
    assert sum(f"{spec.path}:8:" in line for line in lines) == 1
    assert "got None" not in caplog.text
    totals = [line for line in lines if "skipped in all" in line]
    assert len(totals) == 1 and "1 malformed line(s) skipped in all, 14 questions read" in totals[0]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_skip_bad_lines_must_be_a_boolean(tmp_path: Path):
    spec = QuestionSpec(path=str(_questions(tmp_path / "qa.jsonl")), skip_bad_lines="yes")  # type: ignore[arg-type]
    with pytest.raises(DataError, match="skip_bad_lines='yes' must be true or false"):
        load_question_spec(spec)
