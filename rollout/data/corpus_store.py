"""A corpus on disk that every process maps and shares: the passages as one Arrow file, looked up by row or id.

A gateway used to parse its corpus into one `Passage` object per line (about 1 KB each, in every gateway process
and Serve replica, after seconds of JSON per million lines). The store is written once per corpus, streamed from
its source, into the cache as `corpus-store-<key>/`:

    passages.arrow   columns id, title, text, doc_id (Arrow IPC file, uncompressed, so it can be memory-mapped)
    ids.npy          per row, a 64-bit hash of its id, sorted; rows.npy the row of each (row order among equal hashes)
    docs.npy         the same for each row's source document (`Passage.source_id`); doc_rows.npy its rows
    meta.json        written last: passages, the corpus fingerprint (`rollout.retrieval.cache.corpus_fingerprint`),
                     the sha256 of each of the four .npy files

Opening it reads meta.json and the Arrow footer; `open_corpus` also checks the .npy files against their sha256 (a
few flipped bits there lose a document or name a row out of range, silently). The text is not checked: it is most of
the store's bytes, and reading them all at each start is what the store avoids. A store `open_corpus` cannot use
(no meta.json: a disk that filled up, a copy cut short; unreadable; a checksum that differs) is written again, with
a warning.

A passage is built when a row is asked for: its four strings are read with `pread` at the offsets the memory-mapped
offset arrays give, so a process holds none of the text in its resident set (a fault on the mapping maps a whole
page-cache folio: 1.5 MB a passage read on average here, for a few hundred bytes); the page cache the kernel shares
between processes serves the reads. A scan (`__iter__`, `contents`: an index build) reads the mapped columns in bulk.
An id or document lookup binary-searches the hash arrays (also memory-mapped) and compares the ids themselves, so a
hash collision costs a comparison, never a wrong row. The key is the source's spec and the size and modification
time of its files (`rollout.data.materialize`): an edited corpus gets a new store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa

from rollout.cache_folder import discard, remove_abandoned, temp_dir_for, writes_cache
from rollout.data.materialize import corpus_cache_key
from rollout.data.specs import CorpusSpec
from rollout.errors import DataError
from rollout.records import Passage

logger = logging.getLogger(__name__)

STORE_VERSION = 1
"""Bump when the files of a store change: a store of another version is rebuilt."""
_PASSAGES = "passages.arrow"
_META = "meta.json"
_ARRAYS = ("ids.npy", "rows.npy", "docs.npy", "doc_rows.npy")
"""The files whose sha256 meta.json records: small (32 bytes a passage together), read whole at open, and what every
lookup trusts."""
_UNCHECKED = "has no checksums (written by an earlier version)"
_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string()), ("doc_id", pa.string())])
_BATCH_ROWS = 65_536
_BATCH_BYTES = 64 * 1024 * 1024
"""A record batch ends at this many rows or bytes of text, whichever comes first: long documents (BrowseComp-Plus'
are tens of KB) stay far from Arrow's 2 GiB per string array, and a write holds one batch at a time."""


def id_hashes(ids: Iterable[str]) -> np.ndarray:
    """A stable 64-bit hash of each id (blake2b), the same in every process and Python version."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(i.encode("utf-8"), digest_size=8).digest(), "little")
                        for i in ids), dtype=np.uint64)


class CorpusStore(Sequence[Passage]):
    """The passages of one corpus, read from its memory-mapped store: `store[row]` is a `Passage`."""

    def __init__(self, path: Path) -> None:
        """Open the store directory `path` (written by `write_store`); a `DataError` says to delete a broken one."""
        self.path = Path(path)
        try:
            meta = json.loads((self.path / _META).read_text(encoding="utf-8"))
            if meta.get("version") != STORE_VERSION:
                raise ValueError(f"version {meta.get('version')}, not {STORE_VERSION}")
            mapped = pa.memory_map(str(self.path / _PASSAGES), "r")
            reader = pa.ipc.open_file(mapped)
            self._batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            self._columns = _ColumnReader(self.path / _PASSAGES, mapped, self._batches)
            self._ids = _HashIndex(self.path, "ids.npy", "rows.npy")
            self._docs = _HashIndex(self.path, "docs.npy", "doc_rows.npy")
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:
            raise DataError(f"cannot read the corpus store at {self.path} ({e}); delete that directory and it is "
                            "written again from the corpus") from e
        self._starts = np.cumsum([0] + [b.num_rows for b in self._batches]).tolist()
        self.fingerprint: str = meta["fingerprint"]
        """sha256 over ids and contents in order, as `corpus_fingerprint` computes it: index cache keys use it."""
        if self._starts[-1] != meta["passages"] or len(self._ids) != meta["passages"]:
            raise DataError(f"the corpus store at {self.path} holds {self._starts[-1]} passages, its meta.json says "
                            f"{meta['passages']}; delete that directory and it is written again")

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, row: int) -> Passage: ...
    @overload
    def __getitem__(self, row: slice) -> list[Passage]: ...

    def __getitem__(self, row: int | slice) -> Passage | list[Passage]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        pid, title, text, doc_id = self._row(row)
        return Passage(pid, title, text, doc_id or None)  # an empty doc_id is a null one: ids are never empty

    def _row(self, row: int, columns: Sequence[int] = (0, 1, 2, 3)) -> list[str]:
        n = len(self)
        if not -n <= row < n:
            raise IndexError(f"passage row {row} out of range for a corpus of {n}")
        row = int(row) % n
        b = bisect_right(self._starts, row) - 1
        return self._columns.row(b, row - self._starts[b], columns)

    def source_id(self, row: int) -> str:
        """`self[row].source_id`, read from the id columns alone: a search ranking documents touches many long
        passages whose text it does not need."""
        pid, doc_id = self._row(row, (0, 3))
        return doc_id or pid

    def __iter__(self) -> Iterator[Passage]:
        for batch in self._batches:
            yield from map(Passage, *(batch.column(c).to_pylist() for c in range(4)))

    def contents(self, start: int, stop: int) -> list[str]:
        """`Passage.contents` (title, newline, text) of rows start..stop-1: what the indexes read."""
        out: list[str] = []
        for b, batch in enumerate(self._batches):
            lo, hi = max(start, self._starts[b]), min(stop, self._starts[b + 1])
            if lo < hi:
                part = batch.slice(lo - self._starts[b], hi - lo)
                out += [f"{t}\n{x}" for t, x in zip(part.column(1).to_pylist(), part.column(2).to_pylist(), strict=True)]
        return out

    def text_bytes(self) -> int:
        """Bytes of title and text in the store (UTF-8, read from the Arrow buffers' sizes, no passage read)."""
        return sum(batch.column(c).nbytes for batch in self._batches for c in (1, 2))

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """The row of each passage id (int64), -1 for an id the corpus does not hold."""
        return np.array([next(iter(self._ids.rows(i, lambda row: self._row(row, (0,))[0])), -1) for i in ids],
                        dtype=np.int64)

    def doc_rows(self) -> DocRows:
        """The rows of each source document, in corpus order, as a mapping looked up on the store."""
        return DocRows(self)

    def doc_rows_of(self, doc: str) -> tuple[int, ...]:
        return tuple(self._docs.rows(doc, self.source_id))

    def damage(self) -> str | None:
        """What is wrong with the id and row arrays (a sha256 that differs from the one recorded when they were
        written, or none recorded); None when they are as written."""
        recorded = json.loads((self.path / _META).read_text(encoding="utf-8")).get("checksums")
        if not isinstance(recorded, dict):
            return _UNCHECKED
        changed = [name for name, digest in _checksums(self.path).items() if recorded.get(name) != digest]
        return f"has {', '.join(changed)} changed since it was written (its checksum differs)" if changed else None


class _ColumnReader:
    """Reads one row's strings with `pread`: each column's offsets from the mapped file, its bytes from the file."""

    def __init__(self, path: Path, mapped: pa.MemoryMappedFile, batches: list[pa.RecordBatch]) -> None:
        mapped.seek(0)
        base = mapped.read_buffer().address  # zero-copy: the mapping's first byte
        self._fd = os.open(path, os.O_RDONLY)
        self._offsets: list[list[np.ndarray]] = []
        self._data: list[list[int]] = []
        for batch in batches:
            offsets, data = [], []
            for c in range(batch.num_columns):
                column = batch.column(c)
                _, offset_buffer, data_buffer = column.buffers()
                offsets.append(np.frombuffer(offset_buffer, dtype=np.int32)[column.offset:column.offset + len(column) + 1])
                data.append(0 if data_buffer is None else data_buffer.address - base)
            self._offsets.append(offsets)
            self._data.append(data)

    def row(self, batch: int, i: int, columns: Sequence[int] = (0, 1, 2, 3)) -> list[str]:
        """Row `i` of `batch`, its `columns` (id, title, text, doc_id) only: an id lookup reads no passage text."""
        out = []
        for c in columns:
            offsets, start = self._offsets[batch][c], self._data[batch][c]
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            out.append(os.pread(self._fd, hi - lo, start + lo).decode("utf-8") if hi > lo else "")
        return out

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:  # not when __init__ failed before opening the file
            os.close(self._fd)


class DocRows(Mapping[str, tuple[int, ...]]):
    """`KnowledgeBase.doc_rows()` for a store: each lookup searches the store's document hashes."""

    def __init__(self, store: CorpusStore) -> None:
        self._store = store

    def __getitem__(self, doc: str) -> tuple[int, ...]:
        rows = self._store.doc_rows_of(doc)
        if not rows:
            raise KeyError(doc)
        return rows

    def __contains__(self, doc: object) -> bool:
        return isinstance(doc, str) and bool(self._store.doc_rows_of(doc))

    def __iter__(self) -> Iterator[str]:
        """Every document once, in corpus order (a scan of the whole corpus: for folder-sized corpora)."""
        return iter(dict.fromkeys(p.source_id for p in self._store))

    def __len__(self) -> int:
        return len(self._store._docs.distinct())


class _HashIndex:
    """Sorted 64-bit hashes of a column's values and the row of each, memory-mapped."""

    def __init__(self, path: Path, hashes: str, rows: str) -> None:
        self._hashes = np.load(path / hashes, mmap_mode="r", allow_pickle=False)
        self._rows = np.load(path / rows, mmap_mode="r", allow_pickle=False)
        if self._hashes.shape != self._rows.shape:
            raise ValueError(f"{hashes} and {rows} differ in length")

    def __len__(self) -> int:
        return len(self._hashes)

    def rows(self, value: str, value_of: Any) -> list[int]:
        """The rows whose value is `value`, ascending; `value_of(row)` reads a row's value to rule out collisions."""
        h = id_hashes([value])[0]
        lo, hi = np.searchsorted(self._hashes, h, "left"), np.searchsorted(self._hashes, h, "right")
        return [row for row in map(int, self._rows[lo:hi]) if value_of(row) == value]

    def distinct(self) -> np.ndarray:
        return np.unique(self._hashes)


def write_store(passages: Iterable[Passage], path: Path) -> int:
    """Stream `passages` into a new store directory `path` (which must not exist); the number written."""
    path.mkdir(parents=True)
    digest = hashlib.sha256()
    id_hash: list[np.ndarray] = []
    doc_hash: list[np.ndarray] = []
    n = 0
    with pa.OSFile(str(path / _PASSAGES), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
        for batch in _batches(passages):
            for pid, contents in zip(batch[0], (f"{t}\n{x}" for t, x in zip(batch[1], batch[2], strict=True)),
                                     strict=True):
                # The bytes `corpus_fingerprint` hashes, so index caches keep their keys.
                digest.update(json.dumps([pid, contents], ensure_ascii=False).encode("utf-8"))
                digest.update(b"\n")
            writer.write_batch(pa.record_batch([pa.array(column, pa.string()) for column in batch], schema=_SCHEMA))
            id_hash.append(id_hashes(batch[0]))
            doc_hash.append(id_hashes(d if d is not None else i for i, d in zip(batch[0], batch[3], strict=True)))
            n += len(batch[0])
    for hashes, (hash_name, rows_name) in ((id_hash, ("ids.npy", "rows.npy")), (doc_hash, ("docs.npy", "doc_rows.npy"))):
        values = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        order = np.argsort(values, kind="stable")  # rows of equal hashes stay in corpus order
        np.save(path / hash_name, values[order], allow_pickle=False)
        np.save(path / rows_name, order.astype(np.int64), allow_pickle=False)
    _check_unique_ids(path)
    (path / _META).write_text(json.dumps({"version": STORE_VERSION, "passages": n, "fingerprint": digest.hexdigest(),
                                          "checksums": _checksums(path)}), encoding="utf-8")
    return n


def _checksums(path: Path) -> dict[str, str]:
    """The sha256 of each of the store's arrays, hashed side by side (hashlib lets go of the GIL while it hashes)."""
    with ThreadPoolExecutor(len(_ARRAYS)) as pool:
        return dict(zip(_ARRAYS, pool.map(lambda name: _sha256(path / name), _ARRAYS), strict=True))


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _check_unique_ids(path: Path) -> None:
    """A `DataError` naming an id two passages share. Only rows of equal hashes are read and compared: a whole
    corpus' ids are never held at once."""
    hashes = np.load(path / "ids.npy", mmap_mode="r", allow_pickle=False)
    rows = np.load(path / "rows.npy", mmap_mode="r", allow_pickle=False)
    equal = np.flatnonzero(hashes[1:] == hashes[:-1])
    if len(equal) == 0:
        return
    reader = pa.ipc.open_file(pa.memory_map(str(path / _PASSAGES), "r")).read_all().column("id")
    seen: dict[str, int] = {}
    for row in sorted({int(rows[i]) for i in equal} | {int(rows[i + 1]) for i in equal}):
        pid = reader[row].as_py()
        if pid in seen:
            raise DataError(f"passage id {pid!r} is used by passages {seen[pid] + 1} and {row + 1} of the corpus "
                            "(counting passages read, malformed lines left out); ids must be unique")
        seen[pid] = row


def _batches(passages: Iterable[Passage]) -> Iterator[list[list[Any]]]:
    """The passages as column lists (id, title, text, doc_id), cut by `_BATCH_ROWS` and `_BATCH_BYTES`."""
    columns: list[list[Any]] = [[], [], [], []]
    size = 0
    for p in passages:
        for column, value in zip(columns, (p.id, p.title, p.text, p.doc_id), strict=True):
            column.append(value)
        size += len(p.text) + len(p.title)
        if len(columns[0]) >= _BATCH_ROWS or size >= _BATCH_BYTES:
            yield columns
            columns, size = [[], [], [], []], 0
    if columns[0]:
        yield columns


@writes_cache
def open_corpus(source: Path | str | CorpusSpec, cache_dir: Path) -> CorpusStore:
    """The store of the corpus `source` names (a corpus file or folder, or a spec), written into `cache_dir` once,
    and written again when the one there cannot be used (with a warning saying why).

    Ids are checked as `load_corpus` checks them (a repeated id is a `DataError`); malformed lines are skipped with
    the same warnings. Two processes writing the same store at once both finish; the first rename wins. Temporaries
    that killed writes left in `cache_dir` are removed first (`rollout.cache_folder`)."""
    from rollout.data.loaders import iter_corpus_spec  # the loaders import pyarrow's readers only when reading

    spec = source if isinstance(source, CorpusSpec) else CorpusSpec(path=str(source))
    final = Path(cache_dir) / f"corpus-store-v{STORE_VERSION}-{corpus_cache_key(spec)}"
    remove_abandoned(final.parent)
    if final.is_dir():
        store, problem = _usable(final)
        if store is not None:
            return store
        if problem.endswith(_UNCHECKED):
            # Written before checksums were recorded: written again once, so that every store served is checked.
            # A store is cheap to write again next to what it protects (a silently wrong lookup), and the indexes
            # stay: they are keyed by the corpus' fingerprint, which writing the store again does not change.
            # A read-only cache (prebuilt, shared) cannot take the new store: there it is served as it is.
            if not os.access(final.parent, os.W_OK):
                logger.debug("%s; served as it is: the cache folder is read-only", problem)
                return CorpusStore(final)
            logger.info("%s; writing it again once", problem)
        else:
            logger.warning("%s; writing it again", problem)
        _discard(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Writing the corpus store for %s to %s (once; later starts map it)", spec.source, final)
    tmp = temp_dir_for(final)
    try:
        n = write_store(iter_corpus_spec(spec, check_ids=False), tmp / "store")
        try:
            os.rename(tmp / "store", final)
        except OSError:
            if not (final / _META).is_file():  # another process finished the same store first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("Wrote %d passages to the corpus store %s", n, final)
    return CorpusStore(final)


def _usable(final: Path) -> tuple[CorpusStore | None, str]:
    """The store at `final` if it can be used as it is, else None and what is wrong with it."""
    if not (final / _META).is_file():
        # meta.json is written last, into a temporary renamed whole: a store folder without it never was complete.
        return None, (f"the corpus store at {final} is incomplete (no meta.json: a disk that filled up, or a copy cut "
                      "short)")
    try:
        store = CorpusStore(final)
        problem = store.damage()
    except DataError as e:
        return None, str(e)
    except (OSError, ValueError) as e:  # meta.json read once more, or a .npy file, and found unreadable
        return None, f"the corpus store at {final} cannot be read ({e})"
    return (store, "") if problem is None else (None, f"the corpus store at {final} {problem}")


def _discard(final: Path) -> None:
    try:
        discard(final)
    except OSError as e:
        raise DataError(f"cannot remove the unusable corpus store at {final} ({e}); delete that directory and it is "
                        "written again") from e


def source_id_of(passages: Sequence[Passage], row: int) -> str:
    """The document of passage `row`: from a store's id columns alone, else the passage's own `source_id`."""
    return passages.source_id(row) if isinstance(passages, CorpusStore) else passages[row].source_id
