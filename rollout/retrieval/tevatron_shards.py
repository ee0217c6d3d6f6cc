"""Tevatron's pickled embedding shards, read once into a faiss index the cache keeps.

BrowseComp-Plus ships its Qwen3-Embedding indexes (`scripts_build_index/download_indexes.sh`) as the files
Tevatron's encoder writes: each a pickle of `(vectors, docids)`, a float array (n, d) and a list of n document
ids, found by a glob such as `indexes/qwen3-embedding-8b/corpus.shard*.pkl`. Its searcher
(`searcher/searchers/faiss_searcher.py`) stacks the shards into one faiss `IndexFlatIP` and answers row i as the
i-th docid. `read_shards_into` builds that index, shard by shard (one shard in memory beside the index), in path
order, with each row labelled by the corpus row of its document (`IndexIDMap`): the run searches it as any dense
index and gets the searcher's scores. A document cut into passages is found at its first passage.

Unpickling can execute code. Shards are read only from the glob the user names (`retriever.dense.tevatron_shards`)
and through an unpickler that builds nothing but what a shard holds (numpy arrays, lists, tuples, strings): any
other class a file names is refused before it is loaded. Nor may a small file ask for much memory: the pickle memo
lets it name one row, string or shape a million times for two bytes each. So what unpickling allocates, and the
values of vectors given as a list, may not exceed the file's size (a shard's data is all written in it), checked
before anything is allocated.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.encoder import TextEncoder
from rollout.retrieval.params import DenseParams

logger = logging.getLogger(__name__)

SHARDS_FORMAT_VERSION = 1
"""Bumped when the way shards become an index changes, so cached ones are read again."""
SHARDS_FILE = "shards.json"
"""Beside the cached index: the shards it was read from and how much of the corpus they cover."""
_SETTING = "retriever.dense.tevatron_shards"
_UNIT_NORM_TOLERANCE = 1e-3

# What pickling a numpy array and a list of strings writes, for numpy 1 (`numpy.core`) and 2 (`numpy._core`), under
# every pickle protocol: nothing else is needed to read a Tevatron shard, and none of these runs code of the file's
# choosing.
_ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
})


class _Refused(Exception):
    """A shard named a class outside `_ALLOWED`."""


class _TooLarge(Exception):
    """A shard asked for more memory than its file could hold the data of."""


class _ShardUnpickler(pickle.Unpickler):
    """Builds only `_ALLOWED` objects, and of those that allocate (the bytes `_codecs.encode` makes, the array
    `_reconstruct` makes) no more in all than the file has bytes: a shard's arrays are all written in it, whereas
    the pickle memo lets a small file name one string or shape a million times."""

    def __init__(self, file: Any, size: int) -> None:
        super().__init__(file)
        self._budget = size

    def _spend(self, nbytes: int) -> None:
        self._budget -= nbytes
        if self._budget < 0:
            raise _TooLarge

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise _Refused(f"{module}.{name}")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module.removeprefix("numpy.core.")  # numpy 2's name: no deprecation warning
        found = super().find_class(module, name)
        if name == "encode":
            return functools.partial(self._encode, found)
        if name == "_reconstruct":
            return functools.partial(self._reconstruct, found)
        return found

    def _encode(self, encode: Callable[..., Any], text: Any, *args: Any) -> Any:
        # An array's bytes, written as latin-1 text (protocol 2): one byte per character, each in the file.
        self._spend(len(text) if isinstance(text, (str, bytes)) else 0)
        return encode(text, *args)

    def _reconstruct(self, reconstruct: Callable[..., Any], subtype: Any, shape: Any, dtype: Any) -> Any:
        # Pickled arrays are made empty, shape (0,), then filled from the file; any other shape allocates.
        self._spend(int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize)
        return reconstruct(subtype, shape, dtype)


def shard_paths(pattern: str) -> list[Path]:
    """The files `pattern` matches (`~` expanded), in path order; none, or a directory, is an error naming the fix."""
    expanded = os.path.expanduser(pattern)
    if os.path.isdir(expanded):
        raise RetrievalError(
            f"{_SETTING}={pattern!r} is a directory; name its shard files with a glob, e.g. "
            f"{_SETTING}=\"{pattern.rstrip('/')}/corpus.shard*.pkl\""
        )
    # Sorted: the glob's own order is the directory's, which differs between file systems; only ties depend on it.
    paths = sorted(Path(p) for p in glob.glob(expanded) if os.path.isfile(p))
    if not paths:
        raise RetrievalError(
            f"{_SETTING}={pattern!r} matches no file; give the glob of the downloaded shards, e.g. "
            f"{_SETTING}=\"indexes/qwen3-embedding-8b/corpus.shard*.pkl\" (quoted, so the shell leaves the * alone)"
        )
    return paths


def shards_cache_params(paths: Sequence[Path]) -> dict[str, Any]:
    """What decides the index read from `paths`: each file's path, size and modification time (content is not
    hashed: that would read every shard at every start). The corpus is in the cache key beside this."""
    stamps = []
    for path in paths:
        st = path.stat()
        stamps.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    return {"tevatron_shards": stamps, "shards_format": SHARDS_FORMAT_VERSION}


def load_shard(path: Path) -> tuple[np.ndarray, list[str]]:
    """One shard's vectors (float32, C order) and docids, checked; a RetrievalError names the file and the problem."""
    try:
        with open(path, "rb") as f:
            data = _ShardUnpickler(f, os.fstat(f.fileno()).st_size).load()
    except _TooLarge as e:
        raise RetrievalError(
            f"{path} asks for more memory while unpickling than its {path.stat().st_size} bytes hold data for (data "
            "named again by reference); it was refused before allocating it; a shard is Tevatron's encode output, "
            "its vectors a numpy float array"
        ) from e
    except _Refused as e:
        raise RetrievalError(
            f"{path} asks to load {e} while unpickling, which a Tevatron shard never holds; it was refused, "
            f"since unpickling it could run code: check the file, and name in {_SETTING} only shards you trust"
        ) from e
    # A truncated or foreign file fails inside pickle or numpy with many exception types; each means "not a shard".
    except Exception as e:  # noqa: BLE001
        raise RetrievalError(
            f"cannot read {path} as a Tevatron shard ({type(e).__name__}: {e}); {_SETTING} must match only the "
            "pickled (vectors, docids) files, e.g. corpus.shard*.pkl"
        ) from e
    return _checked(path, data)


def _checked(path: Path, data: Any) -> tuple[np.ndarray, list[str]]:
    fix = "a shard is Tevatron's encode output: a pickled (vectors, docids) pair"
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        kind = f"a {len(data)}-item {type(data).__name__}" if isinstance(data, (tuple, list)) else type(data).__name__
        raise RetrievalError(f"{path} holds {kind}, not a (vectors, docids) pair; {fix}")
    reps, lookup = data
    if not isinstance(reps, np.ndarray):
        _check_list_size(path, reps, fix)
    try:
        vectors = np.asarray(reps)
    except (ValueError, TypeError) as e:  # ragged lists of rows
        raise RetrievalError(f"{path}: its vectors are not a matrix ({e}); {fix}") from e
    except MemoryError as e:
        raise RetrievalError(f"{path}: its vectors do not fit in memory as one matrix ({e}); {fix}") from e
    if vectors.ndim != 2 or vectors.dtype.kind != "f" or vectors.shape[1] == 0:
        raise RetrievalError(
            f"{path}: its vectors have shape {vectors.shape} and dtype {vectors.dtype}, not a float matrix of one "
            f"row per docid; {fix}"
        )
    if not isinstance(lookup, (list, tuple)) or not all(isinstance(d, str) for d in lookup):
        what = type(lookup).__name__ if not isinstance(lookup, (list, tuple)) else "a list holding non-strings"
        raise RetrievalError(f"{path}: its docids are {what}, not a list of strings; {fix}")
    if len(lookup) != len(vectors):
        raise RetrievalError(f"{path} holds {len(vectors)} vectors but {len(lookup)} docids; {fix}")
    if not np.isfinite(vectors).all():
        row = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise RetrievalError(f"{path}: the vector of docid {lookup[row]!r} (row {row}) holds NaN or infinity; "
                             "encode that shard again")
    # faiss takes float32; Tevatron's fp16 encodes become float32 exactly, as faiss' own Python wrapper makes them.
    return np.ascontiguousarray(vectors, dtype=np.float32), [str(d) for d in lookup]


def _check_list_size(path: Path, reps: Any, fix: str) -> None:
    """Refuse vectors given as nested lists that hold more values than the file has bytes, before numpy makes them
    one matrix. Tevatron writes a numpy array, whose values are all in the file; a pickled list can name one row a
    million times for two bytes each (the pickle memo), and a 12 MB file would ask for gigabytes. Every value of
    rows that are not repeated costs at least one byte of the file, so an honest list always passes."""
    shape: list[int] = []
    item = reps
    # Along the first items: numpy refuses ragged nesting anyway, so these lengths are the matrix's if it is one.
    while isinstance(item, (list, tuple, np.ndarray)) and len(shape) < 32:
        if isinstance(item, np.ndarray):
            shape.extend(item.shape)
            break
        shape.append(len(item))
        if not item:
            break
        item = item[0]
    values = int(np.prod(shape, dtype=object)) if shape else 1
    size = path.stat().st_size
    if values > size:
        raise RetrievalError(
            f"{path}: its vectors are a list of {' x '.join(map(str, shape))} values, more than its {size} bytes "
            f"can hold (one row repeated by reference); it was refused before numpy allocated it; {fix} (vectors a "
            "numpy float array)"
        )


def check_width(dimension: int, encoder: TextEncoder | None, where: str) -> None:
    """A query encoder of another width than the shards' vectors is an error naming the model to set."""
    if encoder is not None and encoder.dimension != dimension:
        raise RetrievalError(
            f"{where} holds {dimension}-d vectors but encoder {encoder.model_id!r} makes {encoder.dimension}-d ones; "
            "set retriever.dense.encoder to the model that encoded the shards (Qwen3-Embedding-0.6B is 1024-d, "
            "4B 2560-d, 8B 4096-d) and its query side (retriever=qwen3_embedding)"
        )


def check_cached_width(folder: Path, encoder: TextEncoder | None, pattern: str) -> None:
    """Compare a cached shard index's width with the encoder before it is opened: a wrong encoder setting must stop
    the run, not mark a good cache entry unusable and have every shard read again."""
    try:
        dimension = int(json.loads((folder / "meta.json").read_text(encoding="utf-8"))["dimension"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no entry, or a broken one: opening it decides (a broken one is read again)
    check_width(dimension, encoder, f"the index read from {pattern!r}")


def _document_rows(passages: Sequence[Passage]) -> tuple[Callable[[list[str]], np.ndarray], int]:
    """The corpus row of each docid's first passage (-1 for a docid the corpus lacks), and the corpus' document count.

    A corpus store looks documents up in its memory-mapped hashes; a list is indexed once here."""
    doc_rows_of = getattr(passages, "doc_rows_of", None)
    doc_rows = getattr(passages, "doc_rows", None)
    if callable(doc_rows_of) and callable(doc_rows):
        def store_rows(docids: list[str]) -> np.ndarray:
            return np.fromiter(((doc_rows_of(d) or (-1,))[0] for d in docids), dtype=np.int64, count=len(docids))

        return store_rows, len(doc_rows())
    first: dict[str, int] = {}
    for row, passage in enumerate(passages):
        first.setdefault(passage.source_id, row)

    def list_rows(docids: list[str]) -> np.ndarray:
        return np.fromiter((first.get(d, -1) for d in docids), dtype=np.int64, count=len(docids))

    return list_rows, len(first)


def read_shards_into(
    folder: Path, paths: Sequence[Path], passages: Sequence[Passage], *, encoder: TextEncoder | None,
    params: DenseParams,
) -> DenseRetriever:
    """Read every shard into a flat inner-product index labelled by corpus rows, write it into `folder` and open it
    memory-mapped from there. Each shard is checked as it is read; a docid the corpus lacks, or one that two rows
    name, stops the build naming file and docid. Corpus documents the shards miss are counted and logged."""
    rows_of, n_documents = _document_rows(passages)
    taken = np.zeros(len(passages), dtype=bool)
    index: faiss.IndexIDMap | None = None
    dimension = 0
    off_unit = 0
    logger.info("reading %d Tevatron shard(s) into the dense index (once; later runs load it from the cache)",
                len(paths))
    for number, path in enumerate(paths, 1):
        vectors, docids = load_shard(path)
        if index is None:
            dimension = int(vectors.shape[1])
            check_width(dimension, encoder, f"Tevatron shard {path}")
            index = faiss.IndexIDMap(faiss.IndexFlatIP(dimension))
        elif vectors.shape[1] != dimension:
            raise RetrievalError(f"{path} holds {vectors.shape[1]}-d vectors, {paths[0]} {dimension}-d ones; "
                                 f"{_SETTING} must match the shards of one encoding only")
        rows = rows_of(docids)
        _check_rows(path, docids, rows, taken)
        taken[rows] = True
        off_unit += int((np.abs(np.linalg.norm(vectors, axis=1) - 1.0) > _UNIT_NORM_TOLERANCE).sum())
        index.add_with_ids(vectors, rows)
        logger.debug("shard %d/%d: %d vectors from %s", number, len(paths), len(vectors), path)
        del vectors, docids, rows  # one shard at a time beside the index
    assert index is not None  # shard_paths returns at least one file
    if index.ntotal == 0:
        raise RetrievalError(f"the shards {_SETTING} matches hold no vectors ({len(paths)} file(s), all empty)")
    if off_unit:
        logger.warning("%d shard vector(s) are not of unit length; they are ranked by inner product, as "
                       "BrowseComp-Plus' searcher ranks them (encode with --normalize for cosine)", off_unit)
    DenseRetriever(index, None).save(folder)
    coverage = {"documents": n_documents, "documents_without_vector": n_documents - int(index.ntotal),
                "vectors": int(index.ntotal), "shards": [str(p) for p in paths]}
    (folder / SHARDS_FILE).write_text(json.dumps(coverage, indent=2), encoding="utf-8")
    del index  # served from the file, memory-mapped, like every cached dense index
    return open_shard_index(folder, encoder=encoder, params=params)


def _check_rows(path: Path, docids: list[str], rows: np.ndarray, taken: np.ndarray) -> None:
    unknown = np.flatnonzero(rows < 0)
    if len(unknown):
        raise RetrievalError(
            f"{path} names {len(unknown)} docid(s) the corpus does not hold (e.g. {docids[unknown[0]]!r}); the shards "
            "must be an encoding of this corpus: load the corpus they were made from (Tevatron/browsecomp-plus-corpus)"
        )
    seen = taken[rows]
    _, first = np.unique(rows, return_index=True)
    if seen.any() or len(first) != len(rows):
        i = int(np.flatnonzero(seen)[0]) if seen.any() else int(np.setdiff1d(np.arange(len(rows)), first)[0])
        raise RetrievalError(
            f"docid {docids[i]!r} of {path} already has a vector; each docid may appear once in the shards: does "
            f"{_SETTING} match two encodings (e.g. corpus.pkl beside corpus.shard*.pkl)?"
        )


def open_shard_index(folder: Path, *, encoder: TextEncoder | None, params: DenseParams) -> DenseRetriever:
    """The cached index `read_shards_into` wrote, memory-mapped; says how many corpus documents it cannot return."""
    retriever = DenseRetriever.load(folder, encoder=encoder, params=params)
    coverage = json.loads((folder / SHARDS_FILE).read_text(encoding="utf-8"))
    missing = int(coverage["documents_without_vector"])
    if missing:
        # Every run's log says so: its dense numbers are over the documents the shards hold.
        logger.warning("%d of the corpus' %d documents have no vector in the Tevatron shards; dense search never "
                       "returns them", missing, coverage["documents"])
    return retriever
