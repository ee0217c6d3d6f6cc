"""The corpus store: the same passages as the loaders read, by row, id and document, from a file every process maps."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.data import CorpusSpec, CorpusStore, load_corpus, load_corpus_spec, open_corpus
from rollout.data.corpus_store import write_store
from rollout.errors import DataError
from rollout.paths import PROJECT_ROOT
from rollout.records import Passage
from rollout.retrieval.cache import corpus_fingerprint
from tests.data.helpers import write_folder, write_jsonl
from tests.halfway import stopped_halfway

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


def test_a_store_folder_without_its_meta_json_is_written_again_with_a_warning(corpus, tmp_path, caplog):
    """A disk that filled up, or a copy cut short, leaves a store folder without its last file: it is incomplete."""
    cache = tmp_path / "cache"
    store = open_corpus(corpus, cache)
    (store.path / "meta.json").unlink()
    with caplog.at_level(logging.WARNING, logger="rollout.data.corpus_store"):
        again = open_corpus(corpus, cache)
    assert again.path == store.path and list(again) == load_corpus(corpus)
    assert "incomplete" in caplog.text and str(store.path) in caplog.text
    assert not list(cache.glob(".*")), "nothing is left beside the store"


def _flip(path: Path, n: int) -> None:
    """Flip the top byte of each of the file's last `n` 64-bit values (the data ends the .npy file)."""
    data = bytearray(path.read_bytes())
    for i in range(n):
        data[-1 - 8 * i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("array", ["ids.npy", "rows.npy", "docs.npy", "doc_rows.npy"])
def test_flipped_bytes_in_an_id_or_row_array_are_found_at_open_and_the_store_written_again(corpus, tmp_path, caplog,
                                                                                            array):
    cache = tmp_path / "cache"
    store = open_corpus(corpus, cache)
    _flip(store.path / array, 3)
    with caplog.at_level(logging.WARNING, logger="rollout.data.corpus_store"):
        again = open_corpus(corpus, cache)
    assert array in caplog.text and "checksum" in caplog.text
    assert again.rows_of(["c-1", "a", "7", "empty", "c-0"]).tolist() == [3, 0, 1, 4, 2]
    assert [again.doc_rows()[d] for d in ("a", "7", "c", "empty")] == [(0,), (1,), (2, 3), (4,)]


def test_the_damage_the_checksums_catch_is_real(corpus, tmp_path):
    """What a store with flipped bytes answers when nothing checks it: a valid document unknown, a row out of range."""
    store = open_corpus(corpus, tmp_path / "cache")
    _flip(store.path / "doc_rows.npy", 3)
    with pytest.raises(IndexError):
        [CorpusStore(store.path).doc_rows_of(d) for d in ("a", "7", "c", "empty")]
    _flip(store.path / "doc_rows.npy", 3)  # flipped back; now the hashes
    _flip(store.path / "docs.npy", 3)
    assert not all(CorpusStore(store.path).doc_rows_of(d) for d in ("a", "7", "c", "empty"))


def test_a_store_written_before_checksums_is_written_again_once(corpus, tmp_path, caplog, monkeypatch):
    cache = tmp_path / "cache"
    store = open_corpus(corpus, cache)
    meta = json.loads((store.path / "meta.json").read_text())
    del meta["checksums"]
    (store.path / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.INFO, logger="rollout.data.corpus_store"):
        again = open_corpus(corpus, cache)
    assert "no checksums" in caplog.text and "writing it again once" in caplog.text and list(again) == load_corpus(corpus)
    import rollout.data.loaders as loaders

    monkeypatch.setattr(loaders, "iter_corpus_spec", lambda *a, **k: pytest.fail("the store was written again"))
    assert open_corpus(corpus, cache).path == store.path



def test_a_store_written_before_checksums_is_served_from_a_read_only_cache(corpus, tmp_path, monkeypatch):
    """A prebuilt cache on a read-only disk cannot take the store written again: the old one is served as it is."""
    import os

    cache = tmp_path / "cache"
    store = open_corpus(corpus, cache)
    expected = load_corpus(corpus)
    meta = json.loads((store.path / "meta.json").read_text())
    del meta["checksums"]
    (store.path / "meta.json").write_text(json.dumps(meta))
    import rollout.data.loaders as loaders

    monkeypatch.setattr(loaders, "iter_corpus_spec", lambda *a, **k: pytest.fail("the store was written again"))
    monkeypatch.setattr(os, "access", lambda path, mode: not (mode & os.W_OK and Path(path) == cache))
    assert list(open_corpus(corpus, cache)) == expected

_WRITE_AND_HANG = """
import sys, time
from pathlib import Path
import rollout.data.corpus_store as corpus_store

def hang(path):  # the store's files are written into its temporary folder; its meta.json never is
    Path(sys.argv[3]).write_text("writing")
    time.sleep(600)

corpus_store._check_unique_ids = hang
corpus_store.open_corpus(sys.argv[1], Path(sys.argv[2]))
"""


def _writer_in_the_middle(corpus: Path, cache: Path, marker: Path) -> tuple[subprocess.Popen, set[Path]]:
    """A process writing the store, stopped halfway; the temporaries that appeared for it."""
    return stopped_halfway(_WRITE_AND_HANG, [str(corpus), str(cache), str(marker)], marker, cache)


def test_a_killed_writers_temporary_is_removed_and_a_live_writers_kept(corpus, tmp_path, caplog):
    cache = tmp_path / "cache"
    live, live_temps = _writer_in_the_middle(corpus, cache, tmp_path / "live")
    try:
        killed, killed_temps = _writer_in_the_middle(corpus, cache, tmp_path / "killed")
        killed.kill()
        killed.wait()
        assert len(live_temps) == len(killed_temps) == 1
        assert any((t / "store" / "passages.arrow").is_file() for t in killed_temps)
        with caplog.at_level(logging.INFO, logger="rollout"):
            store = open_corpus(corpus, cache)
        assert list(store) == load_corpus(corpus)
        assert set(cache.glob(".tmp-*")) == live_temps, "the killed writer's folder is removed, the live one's kept"
        assert str(next(iter(killed_temps)).name) in caplog.text
    finally:
        live.kill()
        live.wait()


def test_the_checksum_bench_runs_at_a_toy_size():
    out = subprocess.run([sys.executable, "bench/store_checksums.py", "--passages", "1000", "--repeats", "1"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    assert out.startswith("passages 1,000: open ") and "MB hashed" in out
