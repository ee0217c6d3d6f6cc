"""Corpus and question specs over every source format, column mapping, and the errors that name the fix."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pytest

from rollout.data import CorpusSpec, QuestionSpec, load_corpus_spec, load_question_spec
from rollout.errors import DataError
from rollout.records import Passage, Question
from tests.data.helpers import FORMATS, write_jsonl, write_source

PASSAGES = [
    Passage("d1", "Kelmor", "Kelmor is a city in Vandor."),
    Passage("d2", "Arlen Voss", "Arlen Voss was born in 1961.\nHe founded Veltrix."),
    Passage("7", "Ünïcode", "text", doc_id="7-source"),
]
# Each layout: (rows, columns mapping) that must read back as PASSAGES.
LAYOUTS = {
    "flashrag": ([{"id": p.id, "contents": p.contents, "doc_id": p.doc_id} for p in PASSAGES], {}),
    "title-text": ([{"id": p.id, "title": p.title, "text": p.text, "doc_id": p.doc_id} for p in PASSAGES], {}),
    "mapped-contents": ([{"pid": p.id, "passage": p.contents, "src": p.doc_id} for p in PASSAGES],
                        {"id": "pid", "contents": "passage", "doc_id": "src"}),
    "mapped-title-text": ([{"pid": p.id, "head": p.title, "body": p.text, "src": p.doc_id,
                            "contents": "ignored: title and text are mapped"} for p in PASSAGES],
                          {"id": "pid", "title": "head", "text": "body", "doc_id": "src"}),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_corpus_format_and_layout_gives_the_same_passages(tmp_path: Path, fmt: str, layout: str):
    rows, columns = LAYOUTS[layout]
    spec = CorpusSpec(**write_source(fmt, rows, tmp_path), columns=columns)
    assert load_corpus_spec(spec) == PASSAGES


def test_missing_ids_become_row_numbers_in_every_format(tmp_path: Path, caplog):
    rows = [{"text": p.text} for p in PASSAGES]
    for fmt in ("jsonl", "parquet", "save_to_disk"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
            passages = load_corpus_spec(CorpusSpec(**write_source(fmt, rows, tmp_path / fmt)))
        assert [(p.id, p.title, p.text) for p in passages] == [(str(i), "", p.text) for i, p in enumerate(PASSAGES)]
        assert len(caplog.records) == 1 and "dataset.corpus.columns.id" in caplog.text


def test_questions_from_jsonl(tmp_path: Path):
    questions = [Question("q1", "Who founded X?", ["Arlen Voss"], {"hops": 1, "gold_doc_ids": ["d1"]}),
                 Question("q2", "When?", ["1961", "in 1961"], {})]
    spec = QuestionSpec(path=str(write_jsonl(tmp_path / "test.jsonl", [q.to_json() for q in questions])))
    assert load_question_spec(spec) == questions
    assert load_question_spec(spec, limit=1) == questions[:1]


def test_questions_from_a_local_dataset_with_column_mapping_and_string_answers(tmp_path: Path):
    ds = datasets.Dataset.from_dict({
        "qid": ["b1", "b2", "b3"],
        "query": ["Who is the founder of Veltrix?", "Where is Kelmor?", "How old?"],
        "answer": ["Arlen Voss", "Vandor", "42"],
        "gold": [["d2"], ["d1"], []],
        "info": [{"hops": 1}, {"hops": 2}, {"hops": 1}],
    })
    ds.save_to_disk(str(tmp_path / "bamboogle"))
    spec = QuestionSpec(path=str(tmp_path / "bamboogle"), columns={
        "id": "qid", "question": "query", "golden_answers": "answer", "gold_doc_ids": "gold", "metadata": "info"})
    got = load_question_spec(spec, limit=2)
    assert got == [
        Question("b1", "Who is the founder of Veltrix?", ["Arlen Voss"], {"hops": 1, "gold_doc_ids": ["d2"]}),
        Question("b2", "Where is Kelmor?", ["Vandor"], {"hops": 2, "gold_doc_ids": ["d1"]}),
    ]
    assert got[0].gold_doc_ids == ["d2"]


def test_questions_from_a_dataset_dict_pick_the_split(tmp_path: Path):
    rows = {"id": ["q"], "question": ["Q?"], "golden_answers": [["a"]]}
    datasets.DatasetDict({"dev": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict({**rows, "id": ["t"]})}).save_to_disk(str(tmp_path / "dd"))
    assert [q.id for q in load_question_spec(QuestionSpec(path=str(tmp_path / "dd")))] == ["t"]
    assert [q.id for q in load_question_spec(QuestionSpec(path=str(tmp_path / "dd"), split="dev"))] == ["q"]
    with pytest.raises(DataError, match="no split 'train'.*dev, test.*split="):
        load_question_spec(QuestionSpec(path=str(tmp_path / "dd"), split="train"))


def test_questions_through_load_dataset_json(tmp_path: Path):
    rows = [{"id": "n1", "question": "Q?", "golden_answers": ["a", "b"], "metadata": {"src": "nq"}}]
    spec = QuestionSpec(**write_source("hf-json", rows, tmp_path))
    assert load_question_spec(spec) == [Question("n1", "Q?", ["a", "b"], {"src": "nq"})]


def test_malformed_table_rows_are_reported_with_row_numbers_and_skipped(tmp_path: Path, caplog):
    rows = [{"id": "d0", "title": "T", "text": "ok"}, {"id": "d1", "title": "T", "text": None},
            {"id": "d2", "title": 5, "text": "x"}, {"id": "d3", "title": "T", "text": "ok too"}]
    spec = CorpusSpec(**write_source("jsonl", rows, tmp_path / "j"))
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        assert [p.id for p in load_corpus_spec(spec)] == ["d0", "d3"]
    assert f"{spec.path}:2:" in caplog.text and f"{spec.path}:3:" in caplog.text
    q_rows = [{"id": "a", "question": "Q?", "golden_answers": ["x"]},
              {"id": "b", "question": "", "golden_answers": ["x"]},
              {"id": "c", "question": "Q?", "golden_answers": []},
              {"id": "d", "question": "Q?", "golden_answers": ["y"]}]
    q_spec = QuestionSpec(**write_source("parquet", q_rows, tmp_path / "p"), skip_bad_lines=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rollout.data.loaders"):
        assert [q.id for q in load_question_spec(q_spec)] == ["a", "d"]
    assert f"{q_spec.path} row 1:" in caplog.text and f"{q_spec.path} row 2:" in caplog.text
    assert "row 0" not in caplog.text and "row 3" not in caplog.text
    assert "'question'" in caplog.text and "'golden_answers'" in caplog.text


def test_no_usable_row_names_the_source_its_columns_and_the_expected_fields(tmp_path: Path):
    spec = CorpusSpec(**write_source("parquet", [{"key": "a", "passage": "T\nx"}], tmp_path))
    with pytest.raises(DataError, match=r"data\.parquet has no usable row; its columns are key, passage; "
                                        r"expected .*\"contents\".*columns"):
        load_corpus_spec(spec)
    q = QuestionSpec(**write_source("save_to_disk", [{"id": "a", "question": "Q?"}], tmp_path), skip_bad_lines=True)
    with pytest.raises(DataError, match="no usable row.*golden_answers"):
        load_question_spec(q)


def test_no_usable_line_with_a_mapping_names_the_mapping(tmp_path: Path):
    source = write_source("jsonl", [{"id": "d1", "contents": "T\ntext"}], tmp_path)
    spec = CorpusSpec(**source, columns={"text": "body"})
    with pytest.raises(DataError, match=r"has no usable line with dataset\.corpus\.columns=\{'text': 'body'\}"):
        load_corpus_spec(spec)


def test_mapped_column_missing_from_a_table_lists_its_columns(tmp_path: Path):
    spec = CorpusSpec(**write_source("parquet", [{"id": "a", "contents": "T\nx"}], tmp_path), columns={"text": "body"})
    with pytest.raises(DataError, match="no column 'body'.*dataset.corpus.columns.*its columns are id, contents"):
        load_corpus_spec(spec)


def test_duplicate_ids_in_a_table_name_both_rows(tmp_path: Path):
    spec = CorpusSpec(**write_source("parquet", [{"id": "a", "contents": "T\nx"}] * 2, tmp_path))
    with pytest.raises(DataError, match="row 1: id 'a' was already used on row 0"):
        load_corpus_spec(spec)


@pytest.mark.parametrize("make", [
    lambda p: CorpusSpec(path=p, hf_name="json"), lambda p: QuestionSpec(path=p, hf_name="json")])
def test_both_sources_set_is_an_error_naming_the_key(tmp_path: Path, make):
    spec = make(str(tmp_path / "x.jsonl"))
    loader = load_corpus_spec if isinstance(spec, CorpusSpec) else load_question_spec
    with pytest.raises(DataError, match=r"both path=.* and hf_name='json' are set.*\.path=null or .*\.hf_name=null"):
        loader(spec)


def test_no_source_is_an_error_naming_the_keys():
    with pytest.raises(DataError, match=r"dataset\.corpus\.path=.*dataset\.corpus\.hf_name="):
        load_corpus_spec(CorpusSpec())
    with pytest.raises(DataError, match=r"dataset\.questions\.path="):
        load_question_spec(QuestionSpec())


def test_bad_settings_name_the_fix(tmp_path: Path):
    path = str(write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "contents": "T\nx"}]))
    with pytest.raises(DataError, match="unknown field 'passage' in columns; the fields are id, contents"):
        load_corpus_spec(CorpusSpec(path=path, columns={"passage": "text"}))
    with pytest.raises(DataError, match="data_files is read only with hf_name"):
        load_corpus_spec(CorpusSpec(path=path, data_files="x.jsonl"))
    (tmp_path / "c.csv").write_text("id,contents\n")
    with pytest.raises(DataError, match=r"unknown file type '\.csv'.*\.jsonl, \.json or \.parquet"):
        load_corpus_spec(CorpusSpec(path=str(tmp_path / "c.csv")))
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(DataError, match=r"plain_dir holds no documents.*\.md and \.txt.*hf_name="):
        load_corpus_spec(CorpusSpec(path=str(tmp_path / "plain_dir")))
    with pytest.raises(DataError, match="not one written by save_to_disk.*hf_name="):
        load_question_spec(QuestionSpec(path=str(tmp_path / "plain_dir")))


def test_unknown_hf_dataset_offline_is_a_data_error_not_a_download(tmp_path: Path):
    with pytest.raises(DataError, match="could not load Hugging Face dataset no-such-org/no-such-set, config nq, "
                                        "split test.*Hugging Face cache"):
        load_question_spec(QuestionSpec(hf_name="no-such-org/no-such-set", hf_config="nq"))
