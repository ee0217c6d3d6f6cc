"""BrowseComp-Plus' prebuilt dense indexes: Tevatron's pickled (vectors, docids) shards read once into the cache.

The shards here are written as Tevatron's encoder writes them (`pickle.dump((vectors, docids), f)`, one shard in
float16 as its fp16 encodes are), over a corpus where some documents are cut into passages `<docid>#<i>` and two have
no vector. The reference is BrowseComp-Plus' own searcher: one faiss `IndexFlatIP` over the shards stacked in order,
row i answering as the i-th docid.
"""

from __future__ import annotations

import _codecs
import json
import logging
import os
import pickle
import zlib
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.data.corpus_store import CorpusStore, write_store
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import DenseParams, RetrievalParams, load_or_build_indexes
from rollout.retrieval.base import PAD_INDEX
from rollout.retrieval.tevatron_shards import load_shard
from rollout.run.config import compose_run_config
from rollout.run.identity import RunIdentity, identity_settings

DIMENSION = 16
N_DOCUMENTS = 30
CHUNKED = 10
"""Documents 0..9 are cut into three passages each; the others are one passage whose id is the docid."""
UNCOVERED = ("5009", "5021")
"""Corpus documents the shards hold no vector for."""
QUERIES = ["who wrote the score", "deepest lake", "a third question", "x"]


class QueryVectors:
    """A `TextEncoder` double: each query's vector is random, seeded by its text, of unit length."""

    model_id = "test/query-vectors"
    backend = "torch"
    passage_prefix = ""

    def __init__(self, dimension: int = DIMENSION) -> None:
        self.dimension = dimension
        self.encoded = 0

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        rows = [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dimension) for t in texts]
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dimension)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        raise AssertionError("shards are read, never encoded")


def docid(i: int) -> str:
    return str(5000 + i)


def corpus() -> list[Passage]:
    passages = []
    for i in range(N_DOCUMENTS):
        if i < CHUNKED:
            passages += [Passage(f"{docid(i)}#{c}", f"Doc {i}", f"part {c} of document {i}", doc_id=docid(i))
                         for c in range(3)]
        else:
            passages.append(Passage(docid(i), f"Doc {i}", f"the whole of document {i}"))
    return passages


def write_shard(path: Path, vectors: object, docids: object, *, protocol: int = pickle.DEFAULT_PROTOCOL) -> Path:
    with open(path, "wb") as f:
        pickle.dump((vectors, docids), f, protocol=protocol)
    return path


@pytest.fixture
def shards(tmp_path: Path) -> tuple[str, np.ndarray, list[str]]:
    """Three shards of the covered documents in shuffled order (the first float16); the glob naming them, and the
    stacked vectors and docids as BrowseComp-Plus' searcher holds them."""
    folder = tmp_path / "indexes" / "qwen3-embedding-tiny"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("not a shard")  # beside the shards, as a download leaves it; the glob skips it
    rng = np.random.default_rng(7)
    covered = [docid(i) for i in rng.permutation(N_DOCUMENTS) if docid(i) not in UNCOVERED]
    stacked, lookup = [], []
    for n, part in enumerate(np.array_split(np.array(covered), 3)):
        vectors = rng.standard_normal((len(part), DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        if n == 0:
            vectors = vectors.astype(np.float16)  # Tevatron's --fp16 encodes pickle float16 arrays
        write_shard(folder / f"corpus.shard{n}.pkl", vectors, [str(d) for d in part])
        stacked.append(vectors.astype(np.float32))
        lookup += [str(d) for d in part]
    return str(folder / "corpus.shard*.pkl"), np.vstack(stacked), lookup


def open_dense(passages: Sequence[Passage], cache: Path, pattern: str, encoder: QueryVectors | None = None):
    params = RetrievalParams(dense=DenseParams(tevatron_shards=pattern))
    return load_or_build_indexes(passages, cache, which=["dense"], params=params,
                                 encoder=encoder or QueryVectors())["dense"]


def as_store(passages: list[Passage], folder: Path) -> CorpusStore:
    write_store(passages, folder)
    return CorpusStore(folder)


@pytest.mark.parametrize("kind", ["list", "store"])
def test_the_run_searches_exactly_what_faiss_over_the_stacked_shards_finds(tmp_path, shards, kind):
    pattern, stacked, lookup = shards
    passages = corpus() if kind == "list" else as_store(corpus(), tmp_path / "store")
    dense = open_dense(passages, tmp_path / "cache", pattern)
    reference = faiss.IndexFlatIP(DIMENSION)
    reference.add(stacked)
    k = len(lookup) + 3  # every vector ranked, then padding
    query_vectors = QueryVectors().encode_queries(QUERIES)
    want_scores, want_rows = reference.search(query_vectors, len(lookup))
    hits = dense.search(QUERIES, k)
    got = [[passages[int(r)].source_id for r in row[: len(lookup)]] for row in hits.indices]
    assert got == [[lookup[r] for r in row] for row in want_rows]
    np.testing.assert_array_equal(hits.scores[:, : len(lookup)], want_scores)
    assert (hits.indices[:, len(lookup):] == PAD_INDEX).all()
    # A chunked document is found at its first passage.
    rows = {passages[int(r)].id for r in hits.indices[0, : len(lookup)]}
    assert f"{docid(0)}#0" in rows and f"{docid(0)}#1" not in rows


async def test_the_search_tool_of_mode_bcp_dense_answers_what_faiss_over_the_shards_finds(tmp_path):
    """Through the gateway: the miniature BrowseComp-Plus corpus (tests/data/browsecomp_fixture.py) as a run stores
    it, its documents encoded in two shards, and the `search` tool an agent of `mode=bcp_dense` calls."""
    from mcp.client.client import Client

    from rollout.data import CorpusSpec, open_corpus
    from rollout.gateway.knowledge import KnowledgeBase
    from rollout.gateway.server import build_gateway
    from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
    from tests.data.browsecomp_fixture import write_fixture

    bcp = write_fixture(tmp_path / "bcp")
    store = open_corpus(CorpusSpec(path=str(bcp.corpus_parquet), columns={"id": "docid", "text": "text"}),
                        tmp_path / "cache")
    docids = list(bcp.documents)
    vectors = np.random.default_rng(3).standard_normal((len(docids), DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    folder = tmp_path / "indexes" / "qwen3-embedding-tiny"
    folder.mkdir(parents=True)
    half = len(docids) // 2
    write_shard(folder / "corpus.shard0.pkl", vectors[:half].astype(np.float16), docids[:half])
    write_shard(folder / "corpus.shard1.pkl", vectors[half:], docids[half:])
    stacked = np.vstack([vectors[:half].astype(np.float16).astype(np.float32), vectors[half:]])
    dense = open_dense(store, tmp_path / "cache", str(folder / "corpus.shard*.pkl"))
    try:
        async with Client(build_gateway(load_gateway_file(GATEWAYS_DIR / "bcp_dense.json"),
                                        KnowledgeBase(store, {"dense": dense}))) as client:
            result = await client.call_tool("search", {"query": QUERIES[0]})
    finally:
        dense.close()
    reference = faiss.IndexFlatIP(DIMENSION)
    reference.add(stacked)
    scores, rows = reference.search(QueryVectors().encode_queries(QUERIES[:1]), 5)
    hits = json.loads(result.content[0].text)
    assert [h["docid"] for h in hits] == [docids[r] for r in rows[0]]
    assert [h["score"] for h in hits] == [float(s) for s in scores[0]]


def test_the_second_open_reads_no_shard_and_an_edited_shard_is_read_again(tmp_path, shards, caplog):
    pattern, _, _ = shards
    passages, cache = corpus(), tmp_path / "cache"
    first = open_dense(passages, cache, pattern).search(QUERIES, 5)
    # Garbage of the same size and time stamps in place of every shard: the cache must not look inside them.
    files = sorted(Path(pattern).parent.glob("corpus.shard*.pkl"))
    stamps = {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in files}
    originals = {p: p.read_bytes() for p in files}
    for p in files:
        p.write_bytes(b"\0" * len(originals[p]))
        os.utime(p, ns=stamps[p])
    with caplog.at_level(logging.INFO, logger="rollout.retrieval.cache"):
        second = open_dense(passages, cache, pattern).search(QUERIES, 5)
    np.testing.assert_array_equal(first.indices, second.indices)
    np.testing.assert_array_equal(first.scores, second.scores)
    assert any(r.getMessage().startswith("loaded dense index") for r in caplog.records)
    # A shard written anew (another modification time) is another index: it is read again.
    for p in files:
        p.write_bytes(originals[p])
    vectors, docids = load_shard(files[1])
    write_shard(files[1], -vectors, docids)
    third = open_dense(passages, cache, pattern).search(QUERIES, 5)
    assert not np.array_equal(first.scores, third.scores)


def test_documents_without_a_vector_are_counted_in_every_runs_log(tmp_path, shards, caplog):
    pattern, _, _ = shards
    for _ in range(2):  # the read, then the cached index
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rollout.retrieval.tevatron_shards"):
            open_dense(corpus(), tmp_path / "cache", pattern)
        assert [r.getMessage() for r in caplog.records] == [
            f"{len(UNCOVERED)} of the corpus' {N_DOCUMENTS} documents have no vector in the Tevatron shards; dense "
            "search never returns them"]


def _bad(tmp: Path, name: str) -> tuple[str, str]:
    """A shard folder with one bad shard beside a good one; the glob and the message expected."""
    folder = tmp / name
    folder.mkdir()
    good = np.eye(4, DIMENSION, dtype=np.float32)
    write_shard(folder / "corpus.shard0.pkl", good, [docid(i) for i in range(10, 14)])
    bad = folder / "corpus.shard1.pkl"
    vectors = np.eye(2, DIMENSION, dtype=np.float32)
    two = [docid(20), docid(21)]
    expected = {
        "not_a_pair": lambda: (bad.write_bytes(pickle.dumps({"vectors": vectors})),
                               "holds dict, not a (vectors, docids) pair"),
        "three_items": lambda: (bad.write_bytes(pickle.dumps((vectors, two, 1))), "holds a 3-item tuple"),
        "flat_vectors": lambda: (write_shard(bad, vectors[0], two), "vectors have shape (16,)"),
        "text_vectors": lambda: (write_shard(bad, np.array([["a"] * DIMENSION] * 2), two), "dtype <U1"),
        "count": lambda: (write_shard(bad, vectors, two[:1]), "holds 2 vectors but 1 docids"),
        "int_docids": lambda: (write_shard(bad, vectors, [20, 21]), "docids are a list holding non-strings"),
        "width": lambda: (write_shard(bad, np.eye(2, 8, dtype=np.float32), two), "holds 8-d vectors"),
        "nan": lambda: (write_shard(bad, np.where(np.eye(2, DIMENSION) > 0, np.nan, 0).astype(np.float32), two),
                        "holds NaN or infinity"),
        "truncated": lambda: (bad.write_bytes(pickle.dumps((vectors, two))[:40]), "cannot read"),
        "unknown_docid": lambda: (write_shard(bad, vectors, [docid(20), "not-in-corpus"]),
                                  "names 1 docid(s) the corpus does not hold (e.g. 'not-in-corpus')"),
        "repeated_docid": lambda: (write_shard(bad, vectors, [docid(20), docid(10)]),
                                   f"docid '{docid(10)}' of {bad} already has a vector"),
        "repeated_in_a_shard": lambda: (write_shard(bad, vectors, [docid(20), docid(20)]),
                                        f"docid '{docid(20)}' of {bad} already has a vector"),
    }[name]()
    return str(folder / "corpus.shard*.pkl"), expected[1]


BAD = ["not_a_pair", "three_items", "flat_vectors", "text_vectors", "count", "int_docids", "width", "nan", "truncated",
       "unknown_docid", "repeated_docid", "repeated_in_a_shard"]


@pytest.mark.parametrize("name", BAD)
def test_a_bad_shard_is_refused_naming_the_file_and_nothing_is_cached(tmp_path, name):
    pattern, expected = _bad(tmp_path, name)
    with pytest.raises(RetrievalError) as info:
        open_dense(corpus(), tmp_path / "cache", pattern)
    assert expected in str(info.value)
    assert "corpus.shard1.pkl" in str(info.value)
    assert not list((tmp_path / "cache").glob("dense-*"))


class RunsCode:
    """Unpickling this calls `Path.touch` on a file: what a hostile pickle could do with any callable."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_a_shard_that_would_run_code_is_refused_before_it_runs(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    touched = tmp_path / "touched"
    write_shard(folder / "corpus.shard0.pkl", RunsCode(touched), [docid(10)])
    with pytest.raises(RetrievalError, match=r"asks to load pathlib\.Path\.touch while unpickling.*refused"):
        open_dense(corpus(), tmp_path / "cache", str(folder / "corpus.shard*.pkl"))
    assert not touched.exists()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_shards_of_every_pickle_protocol_are_read_exactly(tmp_path, protocol):
    vectors = np.random.default_rng(protocol).standard_normal((3, 5)).astype(np.float16)
    path = write_shard(tmp_path / "s.pkl", vectors, ["a", np.str_("b"), "c"], protocol=protocol)
    read, docids = load_shard(path)
    assert read.dtype == np.float32 and read.flags.c_contiguous and docids == ["a", "b", "c"]
    np.testing.assert_array_equal(read, vectors.astype(np.float32))


def test_a_glob_matching_nothing_or_a_folder_says_what_to_give(tmp_path, shards):
    pattern, _, _ = shards
    with pytest.raises(RetrievalError, match=r"matches no file; give the glob of the downloaded shards"):
        open_dense(corpus(), tmp_path / "cache", str(tmp_path / "nowhere" / "corpus.*.pkl"))
    folder = str(Path(pattern).parent)
    with pytest.raises(RetrievalError, match=r"is a directory; name its shard files with a glob, e\.g\. "
                                             r"retriever\.dense\.tevatron_shards=\".*/corpus\.shard\*\.pkl\""):
        open_dense(corpus(), tmp_path / "cache", folder)


def test_an_encoder_of_another_width_is_refused_and_the_cached_index_kept(tmp_path, shards):
    pattern, _, _ = shards
    cache = tmp_path / "cache"
    expected = open_dense(corpus(), cache, pattern).search(QUERIES, 3)
    with pytest.raises(RetrievalError, match=r"holds 16-d vectors but encoder 'test/query-vectors' makes 8-d ones; "
                                             r"set retriever\.dense\.encoder to the model that encoded the shards"):
        open_dense(corpus(), cache, pattern, QueryVectors(8))
    # Before any cache entry exists, the first shard read says the same.
    with pytest.raises(RetrievalError, match=r"Tevatron shard .*corpus\.shard0\.pkl holds 16-d vectors"):
        open_dense(corpus(), tmp_path / "other-cache", pattern, QueryVectors(8))
    for path in Path(pattern).parent.glob("corpus.shard*.pkl"):  # unreadable now: the cache must still serve
        st = path.stat()
        path.write_bytes(b"\0" * st.st_size)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    np.testing.assert_array_equal(open_dense(corpus(), cache, pattern).search(QUERIES, 3).indices, expected.indices)


@pytest.mark.parametrize(("dense", "message"), [
    ({"tevatron_shards": "s/*.pkl", "index_path": "e5_Flat.index"}, "both name the dense index; set only one"),
    ({"tevatron_shards": "s/*.pkl", "index": "hnsw"}, "leave retriever.dense.index=flat"),
])
def test_settings_that_contradict_the_shards_are_refused(dense, message):
    with pytest.raises(RetrievalError, match=message):
        RetrievalParams.from_dict({"dense": dense})


def test_the_shards_and_the_pooling_join_the_runs_identity_and_older_runs_still_resume():
    base = compose_run_config("mode=dense")
    changed = compose_run_config("mode=dense", "retriever.dense.tevatron_shards=indexes/q3/corpus.shard*.pkl",
                                 "retriever.dense.pooling=last")
    old, new = identity_settings(base), identity_settings(changed)
    assert {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)} == {
        "retriever.dense.tevatron_shards", "retriever.dense.pooling"}
    assert new["retriever.dense.tevatron_shards"] == "indexes/q3/corpus.shard*.pkl"
    # A run folder written before these settings existed records neither; unset, they are what it ran with.
    settings = {k: v for k, v in old.items() if k not in ("retriever.dense.tevatron_shards", "retriever.dense.pooling")}
    earlier = RunIdentity(settings=settings, gateway_file_sha256="g", tools={}, dataset={})
    now = RunIdentity(settings=old, gateway_file_sha256="g", tools={}, dataset={})
    assert now.differences(earlier) == []


def test_vectors_listing_one_row_many_times_are_refused_before_numpy_allocates_them(tmp_path):
    """A list naming one row 100,000 times pickles in about 200 KB (each repeat a two-byte memo reference) but asks
    numpy for 1.6 million values: more than the file could hold. At BrowseComp-Plus' width, 3 million repeats make a
    12 MB file ask for gigabytes; the shard must be refused naming the file, before anything is allocated."""
    row = [0.25] * DIMENSION
    path = write_shard(tmp_path / "corpus.shard0.pkl", [row] * 100_000, [docid(10)] * 100_000)
    with pytest.raises(RetrievalError) as info:
        load_shard(path)
    message = str(info.value)
    assert f"{path}: its vectors are a list of 100000 x {DIMENSION} values" in message
    assert f"more than its {path.stat().st_size} bytes can hold" in message
    assert "numpy float array" in message


def test_vectors_as_a_list_of_distinct_rows_are_still_read(tmp_path):
    vectors = np.random.default_rng(5).standard_normal((40, DIMENSION)).astype(np.float32)
    rows = [[float(x) for x in row] for row in vectors]
    path = write_shard(tmp_path / "corpus.shard0.pkl", rows, [docid(i) for i in range(40)])
    read, docids = load_shard(path)
    np.testing.assert_array_equal(read, vectors)
    assert docids == [docid(i) for i in range(40)]
    # A list of numpy rows, as a hand-written shard may hold, too.
    path = write_shard(tmp_path / "corpus.shard1.pkl", list(vectors), [docid(i) for i in range(40)])
    np.testing.assert_array_equal(load_shard(path)[0], vectors)


_reconstruct = np.zeros(1).__reduce__()[0]
"""numpy's `_reconstruct`, under the module name of the numpy installed (`numpy._core` or `numpy.core`)."""


class EmptyArray:
    """Unpickles as numpy's `_reconstruct` of an array of `shape`: allocated, never filled from the file."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __reduce__(self):
        return (_reconstruct, (np.ndarray, self.shape, np.dtype(np.float32)))


class Encoded:
    """Unpickles as `_codecs.encode(text, "latin1")`, as protocol 2 writes an array's bytes; the text memoized."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __reduce__(self):
        return (_codecs.encode, (self.text, "latin1"))


@pytest.mark.parametrize("kind", ["shape", "bytes"])
def test_a_shard_asking_for_more_memory_than_its_bytes_hold_is_refused_while_unpickling(tmp_path, kind):
    """An array made at a shape the file never fills (6.4 MB from a few hundred bytes), or one string encoded a
    thousand times over (10 MB from 25 KB): the unpickler spends no more than the file's size."""
    if kind == "shape":
        data = (EmptyArray((100_000, DIMENSION)), [docid(10)])
    else:
        text = "x" * 10_000  # one string, written once and named again by reference
        data = ([Encoded(text) for _ in range(1_000)], [docid(10)])
    path = write_shard(tmp_path / "corpus.shard0.pkl", *data)
    with pytest.raises(RetrievalError) as info:
        load_shard(path)
    assert str(info.value).startswith(f"{path} asks for more memory while unpickling than its "
                                      f"{path.stat().st_size} bytes hold data for")
