"""dataset=browsecomp_plus reads BrowseComp-Plus' files as its authors ship them (the miniature of
tests/data/browsecomp_fixture.py): the corpus from jsonl, parquet or the Hugging Face cache, the decrypted queries, and
the two qrels files into each question's evidence_doc_ids and gold_doc_ids."""

from __future__ import annotations

import logging

import pytest

from rollout.data import open_corpus
from rollout.data.browsecomp_plus import CORPUS_DOWNLOAD, QrelsSpec, read_qrels, read_qrels_spec
from rollout.data.dataset import prepare_data
from rollout.errors import ConfigError, DataError
from rollout.run.config import compose_run_config
from tests.data.browsecomp_fixture import BrowseCompFixture, generate, write_fixture


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> BrowseCompFixture:
    return write_fixture(tmp_path_factory.mktemp("bcp") / "files")


def dataset(fixture: BrowseCompFixture, *overrides: str, corpus: str = "jsonl"):
    return compose_run_config(*fixture.overrides(corpus), "mode=bcp_bm25", *overrides).dataset


def test_the_fixture_is_long_documents_in_browsecomp_plus_formats(fixture):
    rows, queries, _, _ = generate()
    assert rows == generate()[0]  # deterministic
    assert len(rows) == 14 and all(set(row) == {"docid", "text", "url"} for row in rows)
    assert all(2000 <= len(row["text"].split()) <= 3100 for row in rows)
    fields = {"query_id", "query", "answer", "evidence_docs", "gold_docs", "negative_docs"}
    assert all(set(q) == fields for q in queries)
    assert fixture.qrel_gold.read_text().splitlines()[0] == "101 Q0 10000 1"


@pytest.mark.parametrize("corpus", ["jsonl", "parquet"])
def test_each_query_is_a_question_with_its_answer_and_judged_documents(fixture, tmp_path, corpus):
    data = prepare_data(dataset(fixture, corpus=corpus), tmp_path)
    questions = list(data.questions)
    assert [q.id for q in questions] == ["101", "102", "103", "104"]
    first = questions[0]
    assert first.question == "What is the harbor code of the Velmora Institute?"
    assert first.golden_answers == ["Amber Lantern"]
    assert first.metadata == {"evidence_doc_ids": ["10000", "10222"], "gold_doc_ids": ["10000"]}
    assert first.gold_doc_ids == ["10000"]  # what the run's retrieval recall is scored against
    store = open_corpus(data.corpus_path, tmp_path)
    assert len(store) == 14  # one row per document: nothing cut
    row = store[int(store.rows_of(["10111"])[0])]
    assert (row.id, row.title, row.text) == ("10111", "", fixture.documents["10111"])  # the text exactly


def test_the_whole_question_set_and_a_limited_one_carry_the_qrels(fixture, tmp_path):
    data = prepare_data(dataset(fixture, "dataset.limit=2"), tmp_path)
    assert [q.metadata["gold_doc_ids"] for q in data.questions] == [["10000"], ["10037"]]
    assert len(data.questions.whole()) == 4 and data.questions.whole()[3].metadata["gold_doc_ids"] == ["10111"]


def test_qrels_read_relevant_documents_in_file_order_once_each(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("7 Q0 b 1\n7 Q0 a 2\n\n7 0 b 1\n7 Q0 c 0\n8 Q0 c 0\n")
    assert read_qrels(path, "dataset.qrels.gold") == {"7": ["b", "a"], "8": []}  # relevance 0: judged, not relevant


@pytest.mark.parametrize(("text", "problem"), [
    ("101 Q0 10000\n", r"qrels\.txt:1: '101 Q0 10000' is not a qrels line; dataset\.qrels\.gold must hold TREC"),
    ("101 Q0 10000 1\n101 Q0 10037 yes\n", r"qrels\.txt:2: .*is not a qrels line"),
    ("\n", r"dataset\.qrels\.gold=.*qrels\.txt is empty"),
    (b"101 Q0 \xff 1\n", r"dataset\.qrels\.gold=.*cannot be read"),
])
def test_a_qrels_file_that_cannot_be_used_is_one_error_naming_it(tmp_path, text, problem):
    path = tmp_path / "qrels.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataError, match=problem) as e:
        read_qrels(path, "dataset.qrels.gold")
    assert "\n" not in str(e.value)


def test_a_missing_qrels_file_or_setting_is_an_error_before_the_corpus_is_read(fixture, tmp_path):
    with pytest.raises(DataError, match=r"dataset\.qrels\.evidence=.*nope\.txt: no such file"):
        prepare_data(dataset(fixture, f"dataset.qrels.evidence={tmp_path / 'nope.txt'}"), tmp_path)
    assert not list(tmp_path.glob("corpus-*"))
    with pytest.raises(DataError, match=r"dataset\.qrels\.gold is not set.*qrel_golds\.txt"):
        read_qrels_spec(QrelsSpec(evidence=str(fixture.qrel_evidence)))


def test_judged_documents_the_corpus_lacks_are_one_counted_warning(fixture, tmp_path, caplog):
    sample = tmp_path / "sample.jsonl"  # the corpus without two of the judged pages
    sample.write_text("".join(line for line in fixture.corpus_jsonl.read_text().splitlines(keepends=True)
                              if '"docid": "10000"' not in line and '"docid": "10222"' not in line))
    with caplog.at_level(logging.WARNING, logger="rollout.data.browsecomp_plus"):
        data = prepare_data(dataset(fixture, f"dataset.corpus.path={sample}"), tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("2 of the 8 documents the qrels judge relevant (for 1 query) are not in the corpus")
    assert "10000, 10222" in warnings[0]
    assert next(iter(data.questions)).metadata["gold_doc_ids"] == ["10000"]  # the judgment is kept as it is


def test_the_corpus_from_the_hugging_face_cache_is_read_offline_and_its_absence_names_the_download(fixture, tmp_path):
    with pytest.raises(DataError) as e:  # the data tests refuse sockets: a download attempt would fail otherwise
        prepare_data(dataset(fixture, "dataset.corpus.path=null",
                             "dataset.corpus.hf_name=Tevatron/browsecomp-plus-corpus"), tmp_path)
    message = str(e.value)
    assert "not in the local Hugging Face cache" in message and CORPUS_DOWNLOAD in message and "\n" not in message
    # A dataset `datasets` can read offline (here its parquet loader over the fixture) is the corpus.
    data = prepare_data(dataset(fixture, "dataset.corpus.path=null", "dataset.corpus.hf_name=parquet",
                                f"dataset.corpus.data_files={fixture.corpus_parquet}"), tmp_path)
    store = open_corpus(data.corpus_path, tmp_path)
    assert len(store) == 14 and store[0].text == fixture.documents["10000"]


def test_cutting_the_documents_in_the_corpus_is_refused_naming_the_dense_setting(fixture, tmp_path):
    with pytest.raises(DataError, match=r"chunk_tokens=100 .*retriever\.dense\.passage_tokens"):
        prepare_data(dataset(fixture, "dataset.corpus.chunk_tokens=100"), tmp_path)


def test_qrels_are_read_only_by_browsecomp_plus(fixture, tmp_path):
    with pytest.raises(ConfigError, match=r"dataset\.qrels\.gold is not read by a dataset of files"):
        compose_run_config("dataset=files", f"dataset.corpus.path={fixture.corpus_jsonl}",
                           f"dataset.questions.path={fixture.queries}", f"+dataset.qrels.gold={fixture.qrel_gold}")
    with pytest.raises(ConfigError, match=r"dataset\.qrels\.golds is not a qrels setting.*dataset\.qrels\.gold\?"):
        compose_run_config(*fixture.overrides(), "+dataset.qrels.golds=x")
    with pytest.raises(ConfigError, match=r"dataset\.n_passages is not read by BrowseComp-Plus"):
        compose_run_config(*fixture.overrides(), "+dataset.n_passages=3")


def test_a_missing_corpus_row_field_names_the_column(fixture, tmp_path):
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"id": "1", "contents": "x"}\n')
    with pytest.raises(DataError, match="no usable line"):
        prepare_data(dataset(fixture, f"dataset.corpus.path={bad}"), tmp_path)
