"""Chunking: window sizes, overlap, ids, doc_id, and chunking through a corpus spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.data import CorpusSpec, chunk_passages, load_corpus, load_corpus_spec
from rollout.errors import DataError
from rollout.records import Passage
from tests.data.helpers import write_jsonl


def _words(n: int) -> str:
    return " ".join(f"t{i}" for i in range(n))


def test_long_document_becomes_overlapping_windows():
    doc = Passage("d", "Title", _words(10))
    chunks = chunk_passages([doc], max_tokens=4, overlap=1)
    assert chunks == [Passage("d#0", "Title", "t0 t1 t2 t3", doc_id="d"),
                      Passage("d#1", "Title", "t3 t4 t5 t6", doc_id="d"),
                      Passage("d#2", "Title", "t6 t7 t8 t9", doc_id="d")]
    assert all(c.source_id == "d" for c in chunks)


def test_last_window_is_shorter_and_every_token_is_covered():
    chunks = chunk_passages([Passage("d", "T", _words(11))], max_tokens=4, overlap=1)
    assert [c.text for c in chunks] == ["t0 t1 t2 t3", "t3 t4 t5 t6", "t6 t7 t8 t9", "t9 t10"]
    chunks = chunk_passages([Passage("d", "T", _words(9))], max_tokens=3, overlap=0)
    assert [c.text.split() for c in chunks] == [["t0", "t1", "t2"], ["t3", "t4", "t5"], ["t6", "t7", "t8"]]


@pytest.mark.parametrize(("n", "max_tokens", "overlap"), [(100, 10, 3), (57, 8, 7), (33, 32, 31), (1000, 100, 0)])
def test_windows_share_exactly_overlap_tokens(n: int, max_tokens: int, overlap: int):
    chunks = chunk_passages([Passage("d", "T", _words(n))], max_tokens=max_tokens, overlap=overlap)
    tokens = [c.text.split() for c in chunks]
    assert all(len(t) <= max_tokens for t in tokens) and all(len(t) == max_tokens for t in tokens[:-1])
    for a, b in zip(tokens, tokens[1:]):
        assert a[len(a) - overlap :] == b[:overlap] if overlap else a[-1] != b[0]
    assert tokens[0][0] == "t0" and tokens[-1][-1] == f"t{n - 1}"
    assert [c.id for c in chunks] == [f"d#{i}" for i in range(len(chunks))]


def test_short_documents_pass_through_and_output_is_deterministic():
    docs = [Passage("a", "A", _words(4)), Passage("b", "B", _words(9)), Passage("c", "C", "")]
    chunks = chunk_passages(docs, max_tokens=4, overlap=2)
    assert chunks[0] is docs[0] and chunks[-1] is docs[2] and chunks[0].doc_id is None
    assert [c.id for c in chunks] == ["a", "b#0", "b#1", "b#2", "b#3", "c"]
    assert chunk_passages(docs, max_tokens=4, overlap=2) == chunks


def test_line_breaks_inside_a_window_are_kept():
    chunks = chunk_passages([Passage("d", "T", "a b\nc  d e")], max_tokens=3, overlap=1)
    assert [c.text for c in chunks] == ["a b\nc", "c  d e"]


def test_a_chunk_of_a_chunk_keeps_the_original_document():
    chunks = chunk_passages([Passage("d#0", "T", _words(5), doc_id="d")], max_tokens=3, overlap=0)
    assert [(c.id, c.doc_id) for c in chunks] == [("d#0#0", "d"), ("d#0#1", "d")]


@pytest.mark.parametrize(("max_tokens", "overlap", "fix"), [
    (4, 4, "chunk_overlap=1"), (4, -1, "chunk_overlap"), (0, 0, "chunk_tokens=100"), (2.5, 0, "chunk_tokens")])
def test_invalid_windows_name_the_setting(max_tokens, overlap, fix: str):
    with pytest.raises(DataError, match=fix):
        chunk_passages([Passage("d", "T", "x")], max_tokens=max_tokens, overlap=overlap)


def test_corpus_spec_chunks_what_it_loads(tmp_path: Path):
    docs = [Passage("a", "A", _words(10)), Passage("b", "B", "short one")]
    path = write_jsonl(tmp_path / "c.jsonl", [d.to_json() for d in docs])
    chunked = load_corpus_spec(CorpusSpec(path=str(path), chunk_tokens=4, chunk_overlap=1))
    assert chunked == chunk_passages(load_corpus(path), max_tokens=4, overlap=1)
    assert [c.id for c in chunked] == ["a#0", "a#1", "a#2", "b"]
    with pytest.raises(DataError, match="chunk_overlap=32 must be .* chunk_tokens - 1"):
        load_corpus_spec(CorpusSpec(path=str(path), chunk_tokens=8))


def test_chunk_id_colliding_with_a_document_id_is_an_error(tmp_path: Path):
    rows = [Passage("a", "A", _words(10)).to_json(), {"id": "a#1", "contents": "X\ny"}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(DataError, match=r"c\.jsonl:2: id 'a#1' was already used on line 1"):
        load_corpus_spec(CorpusSpec(path=str(path), chunk_tokens=4, chunk_overlap=1))
