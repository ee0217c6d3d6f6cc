"""The corpus store: the same passages as the loaders read, by row, id and document, from a file every process maps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.data import CorpusSpec, CorpusStore, load_corpus, load_corpus_spec, open_corpus
from rollout.data.corpus_store import write_store
from rollout.errors import DataError
from rollout.records import Passage
from rollout.retrieval.cache import corpus_fingerprint
from tests.data.helpers import write_folder, write_jsonl

ROWS = [
    {"id": "a", "contents": "Alpha Corp\nAlpha Corp makes looms in Dravia."},
    {"id": 7, "title": "Kelmor", "text": "Kelmor is a city. Ünïcödé text, \"quotes\" and\nnewlines."},
    {"id": "c-0", "contents": "Chunk\nfirst part", "doc_id": "c"},
    {"id": "c-1", "contents": "Chunk\nsecond part", "doc_id": "c"},
    {"id": "empty", "contents": "Only a title"},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", ROWS)


def test_the_store_holds_what_the_loader_reads_in_order_with_its_fingerprint(corpus, tmp_path):
    expected = load_corpus(corpus)
    store = open_corpus(corpus, tmp_path / "cache")
    assert isinstance(store, CorpusStore) and len(store) == len(expected) == 5
    assert list(store) == expected
    assert [store[i] for i in range(len(store))] == expected and store[-1] == expected[-1] and store[1:3] == expected[1:3]
    assert store.contents(1, 4) == [p.contents for p in expected[1:4]]
    assert store.fingerprint == corpus_fingerprint(expected) == corpus_fingerprint(store)
    with pytest.raises(IndexError):
        store[5]


def test_ids_and_documents_are_looked_up_without_a_dict_of_the_corpus(corpus, tmp_path):
    store = open_corpus(corpus, tmp_path / "cache")
    assert store.rows_of(["c-1", "a", "missing", "7"]).tolist() == [3, 0, -1, 1]
    docs = store.doc_rows()
    assert docs["c"] == (2, 3) and docs["a"] == (0,) and "c-0" not in docs and "nope" not in docs
    assert list(docs) == ["a", "7", "c", "empty"] and len(docs) == 4
    with pytest.raises(KeyError):
        docs["nope"]


def test_a_hash_collision_costs_a_comparison_not_a_wrong_row(tmp_path, monkeypatch):
    import rollout.data.corpus_store as corpus_store

    real = corpus_store.id_hashes
    monkeypatch.setattr(corpus_store, "id_hashes", lambda ids: real(["same"] * len(list(ids))))
    write_store([Passage("x", "", "one"), Passage("y", "", "two"), Passage("z", "", "three", "x")], tmp_path / "s")
    store = CorpusStore(tmp_path / "s")
    assert store.rows_of(["y", "x", "z", "w"]).tolist() == [1, 0, 2, -1]
    assert store.doc_rows()["x"] == (0, 2)


def test_a_second_open_maps_the_store_and_parses_nothing(corpus, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = open_corpus(corpus, cache)
    import rollout.data.loaders as loaders

    monkeypatch.setattr(loaders, "iter_corpus_spec", lambda *a, **k: pytest.fail("the corpus was parsed again"))
    assert open_corpus(corpus, cache).path == first.path


def test_an_edited_corpus_gets_a_new_store(corpus, tmp_path):
    cache = tmp_path / "cache"
    first = open_corpus(corpus, cache)
    write_jsonl(corpus, ROWS[:2])
    second = open_corpus(corpus, cache)
    assert second.path != first.path and len(second) == 2


def test_a_repeated_id_names_both_passages(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [ROWS[0], ROWS[1], {"id": "a", "contents": "Again\nx"}])
    with pytest.raises(DataError, match=r"passage id 'a' is used by passages 1 and 3"):
        open_corpus(path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("corpus-store-*")), "no store is left for a corpus that was refused"


def test_a_broken_store_is_written_again(corpus, tmp_path, caplog):
    store = open_corpus(corpus, tmp_path / "cache")
    meta = store.path / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "passages": 99}))
    again = open_corpus(corpus, tmp_path / "cache")
    assert list(again) == load_corpus(corpus)
    assert "delete that directory" in caplog.text


def test_folder_and_chunked_corpora_store_their_chunks(tmp_path):
    folder = write_folder(tmp_path / "docs", {"a.md": "# A\n" + "word " * 500, "sub/b.txt": "short note"})
    spec = CorpusSpec(path=str(folder))
    store = open_corpus(spec, tmp_path / "cache")
    expected = load_corpus_spec(spec)
    assert list(store) == expected and len(expected) > 2
    assert store.doc_rows()["a.md"] == tuple(i for i, p in enumerate(expected) if p.source_id == "a.md")


def test_two_processes_map_one_store(corpus, tmp_path):
    """A second process opens the store another wrote: the same passages, read from the shared file."""
    store = open_corpus(corpus, tmp_path / "cache")
    code = ("import sys; from rollout.data import CorpusStore; s = CorpusStore(sys.argv[1]); "
            "print(s[1].text); print(s.rows_of(['c-0'])[0])")
    out = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "2" and store[1].text.splitlines()[0] in out.stdout
