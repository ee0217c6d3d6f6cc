"""materialize_corpus: plain jsonl used in place; anything else written once, atomically, and reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.data import CorpusSpec, load_corpus, load_corpus_spec, materialize_corpus
from rollout.data import materialize as materialize_module
from rollout.errors import DataError
from rollout.records import Passage
from tests.data.helpers import write_folder, write_jsonl, write_source

DOCS = [Passage("d1", "Kelmor", "Kelmor is a city in Vandor. " * 5), Passage("d2", "Arlen Voss", "Born 1961.")]


def _cache_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


@pytest.mark.parametrize("rows", [[d.to_json() for d in DOCS],
                                  [{"id": d.id, "title": d.title, "text": d.text} for d in DOCS]])
def test_plain_jsonl_is_returned_as_is(tmp_path: Path, rows):
    path = write_jsonl(tmp_path / "wiki.jsonl", rows)
    assert materialize_corpus(CorpusSpec(path=str(path)), tmp_path / "cache") == path
    assert _cache_files(tmp_path / "cache") == []


@pytest.mark.parametrize(("fmt", "extra"), [
    ("parquet", {}), ("save_to_disk", {}), ("hf-json", {}), ("json-array", {}),
    ("jsonl", {"chunk_tokens": 4, "chunk_overlap": 1}), ("jsonl", {"columns": {"text": "text", "title": "title"}})])
def test_other_sources_are_written_once_and_reused(tmp_path: Path, monkeypatch, fmt: str, extra: dict):
    rows = [{"id": d.id, "title": d.title, "text": d.text} for d in DOCS]
    spec = CorpusSpec(**write_source(fmt, rows, tmp_path / "src"), **extra)
    cache = tmp_path / "cache"
    out = materialize_corpus(spec, cache)
    assert out.parent == cache and out.name.startswith("corpus-") and out.suffix == ".jsonl"
    assert _cache_files(cache) == [out.name]  # no temporary file left behind
    assert load_corpus(out) == load_corpus_spec(spec)
    if "chunk_tokens" in extra:
        assert {p.source_id for p in load_corpus(out)} == {"d1", "d2"} and len(load_corpus(out)) > 2
    mtime = out.stat().st_mtime_ns

    def must_not_reread(spec: CorpusSpec):
        raise AssertionError("the materialized corpus should have been reused")

    monkeypatch.setattr(materialize_module, "iter_corpus_spec", must_not_reread)
    assert materialize_corpus(spec, cache) == out
    assert out.stat().st_mtime_ns == mtime


def test_a_changed_source_or_spec_gets_a_new_file(tmp_path: Path):
    path = Path(write_source("parquet", [d.to_json() for d in DOCS], tmp_path)["path"])
    cache = tmp_path / "cache"
    first = materialize_corpus(CorpusSpec(path=str(path)), cache)
    rechunked = materialize_corpus(CorpusSpec(path=str(path), chunk_tokens=3, chunk_overlap=0), cache)
    assert rechunked != first
    write_source("parquet", [DOCS[0].to_json()], tmp_path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    edited = materialize_corpus(CorpusSpec(path=str(path)), cache)
    assert edited not in (first, rechunked)
    assert load_corpus(edited) == [DOCS[0]]


def test_a_folder_is_written_once_and_rewritten_when_a_document_changes(tmp_path: Path, monkeypatch):
    root = write_folder(tmp_path / "docs", {"guides/setup.md": "Install it.", "b.txt": " ".join(["w"] * 250)})
    cache = tmp_path / "cache"
    spec = CorpusSpec(path=str(root))
    first = materialize_corpus(spec, cache)
    assert first.parent == cache and first.name.startswith("corpus-") and _cache_files(cache) == [first.name]
    assert load_corpus(first) == load_corpus_spec(spec)
    assert [(p.id, p.doc_id) for p in load_corpus(first)] == [
        ("b.txt#0", "b.txt"), ("b.txt#1", "b.txt"), ("guides/setup.md", "guides/setup.md")]

    # Files the folder does not read leave the key alone.
    write_folder(root, {".notes.md": "hidden", "build.py": "x = 1", ".git/config.txt": "[core]"})
    assert materialize_corpus(spec, cache) == first

    edited = root / "guides" / "setup.md"
    st = edited.stat()
    edited.write_text("Remove it.", encoding="utf-8")  # same size: only the modification time tells
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    second = materialize_corpus(spec, cache)
    assert second != first and load_corpus(second)[-1].text == "Remove it."
    write_folder(root, {"c.md": "new"})
    third = materialize_corpus(spec, cache)
    assert third not in (first, second) and [p.id for p in load_corpus(third)][2:] == ["c.md", "guides/setup.md"]
    rechunked = materialize_corpus(CorpusSpec(path=str(root), chunk_tokens=100, chunk_overlap=0), cache)
    assert rechunked != third and len(load_corpus(rechunked)) == 5

    def must_not_reread(spec: CorpusSpec):
        raise AssertionError("the materialized corpus should have been reused")

    monkeypatch.setattr(materialize_module, "iter_corpus_spec", must_not_reread)
    assert materialize_corpus(spec, cache) == third


def test_an_empty_folder_leaves_nothing_in_the_cache(tmp_path: Path):
    root = write_folder(tmp_path / "docs", {"notes.rst": "not read"})
    with pytest.raises(DataError, match="holds no documents"):
        materialize_corpus(CorpusSpec(path=str(root)), tmp_path / "cache")
    assert _cache_files(tmp_path / "cache") == []


def test_unusable_source_leaves_nothing_in_the_cache(tmp_path: Path):
    spec = CorpusSpec(**write_source("parquet", [{"key": "x"}], tmp_path))
    with pytest.raises(DataError, match="no usable row"):
        materialize_corpus(spec, tmp_path / "cache")
    assert _cache_files(tmp_path / "cache") == []


def test_missing_source_names_the_path(tmp_path: Path):
    for spec in (CorpusSpec(path=str(tmp_path / "wiki18_100w.jsonl")), CorpusSpec(path=str(tmp_path / "x.parquet"))):
        with pytest.raises(DataError, match="does not exist"):
            materialize_corpus(spec, tmp_path / "cache")
