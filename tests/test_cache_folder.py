"""Temporaries in the cache folder name their writer; the abandoned ones go, the ones a writer may still be writing
stay. A folder that cannot be written is one line naming it, whatever the call that found out."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rollout.cache_folder import (
    ABANDONED_AFTER_S,
    remove_abandoned,
    temp_dir_for,
    temp_prefix,
    unwritable_cache,
    writes_cache,
)
from rollout.data import materialize_corpus
from rollout.data.specs import CorpusSpec
from rollout.errors import ConfigError

OLD = ABANDONED_AFTER_S + 3600


def _finished_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _age(path: Path, seconds: float) -> Path:
    """Set the modification time of `path` and everything in it `seconds` in the past."""
    when = time.time() - seconds
    for p in [*path.rglob("*"), path] if path.is_dir() else [path]:
        os.utime(p, (when, when))
    return path


def _temp(cache: Path, name: str, *, files: int = 1) -> Path:
    path = cache / name
    path.mkdir(parents=True)
    for i in range(files):
        (path / f"part-{i}.npy").write_bytes(b"x" * 10)
    return path


def test_a_temporary_names_this_process_and_this_host(tmp_path):
    made = temp_dir_for(tmp_path / "sparse-0123456789abcdef")
    assert made.parent == tmp_path and made.name.startswith(".tmp-sparse-0123456789abcdef.")
    assert f".{os.getpid()}." in made.name and f"@{socket.gethostname()}-" in made.name
    assert temp_dir_for(tmp_path / "x", "broken").name.startswith(".broken-x.")
    with pytest.raises(ValueError, match="kind"):
        temp_prefix("x", "old")


def test_the_temporaries_of_gone_writers_go_and_the_others_stay(tmp_path, caplog):
    cache = tmp_path / "cache"
    host = socket.gethostname()
    dead = _finished_pid()
    gone = _temp(cache, f".tmp-sparse-aaaa.{dead}.12345@{host}-abcd1234")
    broken = _temp(cache, f".broken-dense-flat-bbbb.{dead}.12345@{host}-abcd_234")
    mine = temp_dir_for(cache / "corpus-store-v1-cccc")
    reused = _temp(cache, f".tmp-sparse-dddd.{os.getpid()}.1@{host}-abcd1234")  # our pid, another start: reused
    elsewhere = _temp(cache, f".tmp-sparse-eeee.{dead}.12345@another-host-abcd1234")
    elsewhere_old = _age(_temp(cache, f".tmp-sparse-ffff.{dead}.12345@another-host-abcd1234"), OLD)
    unnamed = _temp(cache, ".tmp-sparse-gggg-abcd1234")  # written before writers were named
    unnamed_old = _age(_temp(cache, ".tmp-corpus-store-v1-hhhh-abcd1234"), OLD)
    file_left = cache / f"{temp_prefix('corpus-iiii.jsonl').replace(str(os.getpid()), str(dead))}abcd1234"
    file_left.write_text("{}\n")
    entry = _temp(cache, "sparse-jjjj")  # a cache entry, not a temporary
    with caplog.at_level("INFO", logger="rollout.cache_folder"):
        removed = remove_abandoned(cache)
    assert set(removed) == {gone, broken, reused, elsewhere_old, unnamed_old, file_left}
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in (mine, elsewhere, unnamed, entry))
    assert f"pid {dead}, is gone" in caplog.text and "another-host, unchanged for 7 days" in caplog.text


def test_a_writer_that_appends_keeps_its_unnamed_temporary(tmp_path):
    """Age counts from the newest change anywhere inside: an old folder with a file being written is not abandoned."""
    cache = tmp_path / "cache"
    unnamed = _age(_temp(cache, ".tmp-corpus-store-v1-kkkk-abcd1234"), OLD)
    (unnamed / "store").mkdir()
    (unnamed / "store" / "passages.arrow").write_bytes(b"growing")
    assert remove_abandoned(cache) == []


def test_a_cache_that_cannot_be_cleaned_or_does_not_exist_is_left_as_it_is(tmp_path, monkeypatch):
    assert remove_abandoned(tmp_path / "no-such-cache") == []
    cache = tmp_path / "cache"
    gone = _temp(cache, f".tmp-sparse-aaaa.{_finished_pid()}.1@{socket.gethostname()}-abcd1234")

    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("rollout.cache_folder.shutil.rmtree", refuse)
    assert remove_abandoned(cache) == [] and gone.is_dir()


def test_the_materialized_corpus_is_written_through_a_named_temporary(tmp_path, monkeypatch):
    """A killed write of a materialized corpus (as large as the corpus) leaves a file the next start removes."""
    corpus = tmp_path / "c.json"
    corpus.write_text('[{"id": "a", "contents": "Alpha"}]')  # a JSON array: rewritten as jsonl
    made = []
    real = tempfile.mkstemp

    def recording(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        made.append(Path(name))
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", recording)
    target = materialize_corpus(CorpusSpec(path=str(corpus)), tmp_path / "cache")
    assert target.read_text() != "" and len(made) == 1 and not made[0].exists()
    assert made[0].name.startswith(temp_prefix(target.name))


@pytest.mark.parametrize(("error", "one_line"), [
    (PermissionError(errno.EACCES, "Permission denied", "{cache}/.tmp-x"), True),
    (OSError(errno.EROFS, "Read-only file system", "{cache}"), True),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "{parent}"), True),
    (FileExistsError(errno.EEXIST, "File exists", "{cache}"), True),
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (PermissionError(errno.EACCES, "Permission denied", "/elsewhere/corpus.jsonl"), False),
    (FileExistsError(errno.EEXIST, "File exists", "{cache}/sparse-x"), False),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "{cache}/x"), False),
    (OSError("disk full"), False),
])
def test_only_errors_that_say_the_cache_cannot_be_written_become_its_line(tmp_path, error, one_line):
    cache = tmp_path / "parent" / "cache"
    if error.filename:
        error.filename = error.filename.format(cache=cache, parent=cache.parent)

    @writes_cache
    def write(data: str, cache_dir: Path) -> None:
        raise error

    if not one_line:
        with pytest.raises(type(error)):
            write("x", cache_dir=cache)
        assert unwritable_cache(cache, error) is None
        return
    with pytest.raises(ConfigError) as raised:
        write("x", cache)
    assert str(raised.value).startswith(f"cannot write in the cache folder {cache} ({error.strerror}")
    assert "ROLLOUT_CACHE_DIR" in str(raised.value) and "\n" not in str(raised.value)
