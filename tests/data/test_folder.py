"""A folder of .txt/.md files as a corpus: what is read, ids and titles, chunking, and the errors that name the fix."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rollout.data import CorpusSpec, is_source_folder, load_corpus_spec
from rollout.data.folder import FOLDER_CHUNK_TOKENS
from rollout.errors import DataError
from rollout.records import Passage
from tests.data.helpers import write_folder, write_source

NESTED = {
    "readme.md": "# Rollout\n\nA harness.",
    "guides/setup.md": "Install it.\n",
    "guides/deep/notes.TXT": "Upper-case extensions count.",
    "a.txt": "First by path.",
    "guides/tool.py": "print('not a document')",
    ".hidden.md": "hidden file",
    ".git/HEAD.txt": "hidden folder",
    "guides/.drafts/wip.md": "hidden folder below the top",
    "data.jsonl": '{"id": "x", "contents": "T\\nnot read either"}',
}


def test_nested_text_and_markdown_files_are_documents_named_by_relative_path(tmp_path: Path):
    root = write_folder(tmp_path / "docs", NESTED)
    passages = load_corpus_spec(CorpusSpec(path=str(root)))
    assert passages == [
        Passage("a.txt", "a.txt", "First by path.", doc_id="a.txt"),
        Passage("guides/deep/notes.TXT", "guides/deep/notes.TXT", "Upper-case extensions count.",
                doc_id="guides/deep/notes.TXT"),
        Passage("guides/setup.md", "guides/setup.md", "Install it.", doc_id="guides/setup.md"),
        Passage("readme.md", "readme.md", "# Rollout\n\nA harness.", doc_id="readme.md"),
    ]


def test_is_source_folder_tells_a_document_folder_from_files_and_save_to_disk(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"a.md": "x"})
    saved = Path(write_source("save_to_disk", [{"id": "a", "contents": "T\nx"}], tmp_path / "saved")["path"])
    assert is_source_folder(root) and is_source_folder(str(root))
    assert not is_source_folder(saved)
    assert not is_source_folder(root / "a.md") and not is_source_folder(tmp_path / "missing")
    assert load_corpus_spec(CorpusSpec(path=str(saved))) == [Passage("a", "T", "x")]


def test_line_endings_trailing_spaces_and_a_byte_order_mark_are_normalised(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"win.txt": b"\xef\xbb\xbfTitle  \r\n\r\n  indented line\r\nlast\t\r\n\r\n"})
    assert load_corpus_spec(CorpusSpec(path=str(root)))[0].text == "Title\n\n  indented line\nlast"


def test_undecodable_bytes_are_replaced_with_one_warning_per_file(tmp_path: Path, caplog):
    root = write_folder(tmp_path / "docs", {"bad1.txt": b"caf\xe9 and \xff", "bad2.md": b"\x80 x", "ok.md": "fine"})
    with caplog.at_level(logging.WARNING, logger="rollout.data.folder"):
        passages = load_corpus_spec(CorpusSpec(path=str(root)))
    assert [p.text for p in passages] == ["caf\ufffd and \ufffd", "\ufffd x", "fine"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "bad1.txt: not valid UTF-8 (byte 0xe9 at byte offset 3)" in warned[0] and "bad2.md" in warned[1]


def test_a_long_file_is_chunked_by_default_and_every_chunk_keeps_the_path(tmp_path: Path):
    words = [f"w{i}" for i in range(450)]
    root = write_folder(tmp_path / "docs", {"guides/long.md": " ".join(words), "short.txt": "two words"})
    passages = load_corpus_spec(CorpusSpec(path=str(root)))
    assert [p.id for p in passages] == ["guides/long.md#0", "guides/long.md#1", "guides/long.md#2", "short.txt"]
    assert {p.doc_id for p in passages[:3]} == {"guides/long.md"} and passages[3].doc_id == "short.txt"
    assert {p.title for p in passages[:3]} == {"guides/long.md"}
    step = FOLDER_CHUNK_TOKENS - 32  # the default chunk_overlap
    assert passages[1].text.split() == words[step : step + FOLDER_CHUNK_TOKENS]
    assert passages[2].text.split() == words[2 * step :]
    configured = load_corpus_spec(CorpusSpec(path=str(root), chunk_tokens=100, chunk_overlap=0))
    assert [p.id for p in configured][:5] == [f"guides/long.md#{i}" for i in range(5)]
    assert configured[4].text.split() == words[400:]


def test_an_overlap_as_large_as_the_default_chunk_names_the_limit(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"a.md": "x"})
    with pytest.raises(DataError, match=rf"chunk_overlap=200 .*= {FOLDER_CHUNK_TOKENS - 1}"):
        CorpusSpec(path=str(root), chunk_overlap=200).check()


def test_a_folder_without_documents_names_it_and_the_extensions_read(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"tool.py": "x", ".hidden.md": "x", "sub/data.json": "[]"})
    with pytest.raises(DataError, match=r"docs holds no documents: a corpus folder is read for its \.md and \.txt"):
        load_corpus_spec(CorpusSpec(path=str(root)))


def test_columns_do_not_apply_to_a_folder(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"a.md": "x"})
    spec = CorpusSpec(path=str(root), columns={"id": "doc_key", "text": "body", "title": None})
    for call in (spec.check, lambda: load_corpus_spec(spec)):
        with pytest.raises(DataError, match=r"folder of \.md/\.txt documents.*columns \{'id': 'doc_key', 'text': "
                                            r"'body'\} cannot apply.*dataset\.corpus\.columns\.id=null"):
            call()


def test_empty_files_are_no_documents_and_are_counted_once(tmp_path: Path, caplog):
    root = write_folder(tmp_path / "docs", {"a.md": "# A\n\nReal text.", "b/empty.md": "", "c.txt": "  \n\t\n",
                                            "d.md": "More text."})
    with caplog.at_level(logging.INFO, logger="rollout.data.folder"):
        passages = load_corpus_spec(CorpusSpec(path=str(root)))
    assert [p.id for p in passages] == ["a.md", "d.md"]
    lines = [r.getMessage() for r in caplog.records if "empty" in r.getMessage()]
    assert len(lines) == 1 and "skipped 2 empty files" in lines[0] and "b/empty.md" in lines[0]


def test_a_folder_of_empty_files_is_an_error(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"a.md": "", "b.txt": "\n"})
    with pytest.raises(DataError, match="every document file is empty"):
        load_corpus_spec(CorpusSpec(path=str(root)))
