"""Corpus and question loaders: round trips, malformed lines, unusable files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rollout.data import QuestionSpec, load_corpus, load_question_spec, load_questions
from rollout.errors import DataError
from rollout.records import Passage, Question


def _write(path: Path, lines: list[str | dict]) -> Path:
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines),
                    encoding="utf-8")
    return path


def test_corpus_round_trip_flashrag_contents(tmp_path: Path):
    passages = [Passage("doc-1", "Kelmor", "Kelmor is a city in Vandor."),
                Passage("doc-2", "Ünïcode title", "Line one\nline two")]
    path = _write(tmp_path / "corpus.jsonl", [p.to_json() for p in passages])
    assert load_corpus(path) == passages


def test_corpus_accepts_title_text_lines_and_integer_ids(tmp_path: Path):
    path = _write(tmp_path / "corpus.jsonl", [{"id": 7, "title": "T", "text": "body"}, ""])
    assert load_corpus(str(path)) == [Passage("7", "T", "body")]


def test_questions_round_trip(tmp_path: Path):
    questions = [Question("q1", "Who founded X?", ["Arlen Voss"], {"hops": 1, "gold_doc_ids": ["d1"]}),
                 Question("q2", "When?", ["1961"], {})]
    path = _write(tmp_path / "q.jsonl", [q.to_json() for q in questions])
    assert load_questions(path) == questions


def test_questions_without_metadata_and_numeric_answers(tmp_path: Path):
    path = _write(tmp_path / "q.jsonl", [{"id": "a", "question": "How many?", "golden_answers": [3, "three"]}])
    assert load_questions(path) == [Question("a", "How many?", ["3", "three"], {})]


def test_single_string_or_number_answer_is_wrapped(tmp_path: Path):
    path = _write(tmp_path / "q.jsonl", [{"id": "a", "question": "Who?", "golden_answers": "Arlen Voss"},
                                         {"id": "b", "question": "When?", "golden_answers": 1961, "metadata": None}])
    assert load_questions(path) == [Question("a", "Who?", ["Arlen Voss"], {}), Question("b", "When?", ["1961"], {})]


def test_corpus_doc_id_round_trip(tmp_path: Path):
    passages = [Passage("d1#0", "T", "a b", doc_id="d1"), Passage("d2", "U", "c")]
    assert passages[0].source_id == "d1" and passages[1].source_id == "d2"
    assert "doc_id" not in passages[1].to_json()
    path = _write(tmp_path / "corpus.jsonl", [p.to_json() for p in passages])
    assert load_corpus(path) == passages


def test_records_without_ids_get_row_numbers_with_one_warning(tmp_path: Path, caplog):
    path = _write(tmp_path / "c.jsonl", [{"contents": "A\na"}, "", {"contents": "B\nb"}, {"contents": "C\nc"}])
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        assert [p.id for p in load_corpus(path)] == ["0", "1", "2"]
    assert len(caplog.records) == 1 and "columns.id" in caplog.text


def test_malformed_question_lines_are_refused_or_on_request_reported_and_skipped(tmp_path: Path, caplog):
    path = _write(tmp_path / "q.jsonl", [
        {"id": "ok1", "question": "Q1?", "golden_answers": ["a"]},
        "{not json",                                                    # line 2
        {"id": "x", "golden_answers": ["a"]},                           # line 3: no question
        {"id": "y", "question": "Q?", "golden_answers": {"a": 1}},      # line 4: not a list or string
        {"id": "z", "question": "Q?", "golden_answers": ["a"], "metadata": []},  # line 5
        "[1, 2]",                                                       # line 6: not an object
        {"id": "ok2", "question": "Q2?", "golden_answers": ["b"]},
    ])
    with pytest.raises(DataError, match=f"{path}:2: .*skip_bad_lines=true"):
        load_questions(path)
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        questions = load_question_spec(QuestionSpec(path=str(path), skip_bad_lines=True))
    assert [q.id for q in questions] == ["ok1", "ok2"]
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for lineno in (2, 3, 4, 5, 6):
        assert f"{path}:{lineno}:" in warned
    assert f"{path}:1:" not in warned and f"{path}:7:" not in warned
    assert "'question'" in warned and "'golden_answers'" in warned


def test_malformed_corpus_line_is_skipped(tmp_path: Path, caplog):
    path = _write(tmp_path / "c.jsonl", [{"id": "d1", "contents": "T\nx"}, {"id": "d2"},
                                         {"id": None, "contents": "T\ny"}])
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        assert [p.id for p in load_corpus(path)] == ["d1"]
    assert f"{path}:2:" in caplog.text and f"{path}:3:" in caplog.text


def test_limit_stops_early(tmp_path: Path):
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "golden_answers": ["a"]} for i in range(10)]
    path = _write(tmp_path / "q.jsonl", rows + ["{broken"])
    assert [q.id for q in load_questions(path, limit=3)] == ["q0", "q1", "q2"]
    with pytest.raises(ValueError, match="null"):
        load_questions(path, limit=0)


@pytest.mark.parametrize("loader", [load_corpus, load_questions])
def test_missing_file_names_the_path_and_format(tmp_path: Path, loader):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match="nope.jsonl") as info:
        loader(path)
    assert "one JSON object per line" in str(info.value)


@pytest.mark.parametrize("loader", [load_corpus, load_questions])
def test_empty_or_unusable_file_names_the_path_and_format(tmp_path: Path, loader):
    empty = _write(tmp_path / "empty.jsonl", [])
    with pytest.raises(DataError, match="empty.jsonl.*no usable line.*one JSON object per line"):
        loader(empty)
    junk = _write(tmp_path / "junk.jsonl", ["{oops", "{}"])
    with pytest.raises(DataError, match="junk.jsonl"):
        loader(junk)


def test_duplicate_ids_are_an_error(tmp_path: Path):
    corpus = _write(tmp_path / "c.jsonl", [{"id": "d1", "contents": "A\na"}, {"id": "d2", "contents": "B\nb"},
                                           {"id": "d1", "contents": "C\nc"}])
    with pytest.raises(DataError, match=r"c\.jsonl:3: id 'd1' was already used on line 1"):
        load_corpus(corpus)
    questions = _write(tmp_path / "q.jsonl", [{"id": "q", "question": "A?", "golden_answers": ["a"]}] * 2)
    with pytest.raises(DataError, match="already used"):
        load_questions(questions)


def test_a_byte_order_mark_is_accepted_silently(tmp_path: Path, caplog):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "d1", "contents": "T\nx"}).encode() + b"\n")
    questions = tmp_path / "q.json"
    questions.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"id": "q1", "question": "Q?", "golden_answers": ["a"]}])
                          .encode())
    with caplog.at_level(logging.WARNING):
        assert [p.id for p in load_corpus(corpus)] == ["d1"]
        assert [q.id for q in load_questions(questions)] == ["q1"]
    assert not caplog.records


def test_a_line_that_is_not_utf8_is_reported_with_its_line_and_skipped(tmp_path: Path, caplog):
    path = tmp_path / "c.jsonl"
    path.write_bytes(json.dumps({"id": "d1", "contents": "T\nx"}).encode() + b"\n"
                     + '{"id": "d2", "contents": "caf\u00e9"}'.encode("latin-1") + b"\n"
                     + json.dumps({"id": "d3", "contents": "T\nz"}).encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        assert [p.id for p in load_corpus(path)] == ["d1", "d3"]
    assert f"{path}:2:" in caplog.text and "UTF-8" in caplog.text


def test_a_json_array_that_is_not_utf8_is_a_data_error_naming_the_file(tmp_path: Path):
    path = tmp_path / "q.json"
    path.write_bytes('[{"id": "q1", "question": "caf\u00e9?", "golden_answers": ["a"]}]'.encode("latin-1"))
    with pytest.raises(DataError, match="UTF-8") as e:
        load_questions(path)
    assert str(path) in str(e.value)
