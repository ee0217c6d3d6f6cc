import json
import logging
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import (
    BM25Retriever,
    DenseParams,
    DenseRetriever,
    HybridParams,
    HybridRetriever,
    RetrievalParams,
    SparseParams,
    load_or_build_indexes,
)
from rollout.retrieval import cache as cache_module
from rollout.retrieval.cache import corpus_fingerprint
from rollout.retrieval.encoder import TextEncoder
from tests.halfway import stopped_halfway

QUERIES = ["birthplace of Ravel", "VX-1234 spectrometer", "deepest lake", "train in the Alps"]
HNSW = RetrievalParams(dense=DenseParams(index="hnsw"))


class CountingEncoder:
    """Delegates to the session encoder and counts how often passages are encoded."""

    def __init__(self, inner: TextEncoder, *, passage_prefix: str = "", query_prefix: str = "") -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.passage_prefix = passage_prefix
        self.query_prefix = query_prefix
        self.passage_calls = 0

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode_queries([self.query_prefix + t for t in texts])

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.passage_calls += 1
        return self.inner.encode_passages([self.passage_prefix + t for t in texts])


def _dirs(cache_dir: Path) -> list[str]:
    return sorted(p.name for p in cache_dir.iterdir())


def test_second_call_loads_without_encoding_the_corpus(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rollout.retrieval.cache")
    first_encoder = CountingEncoder(encoder)
    first = load_or_build_indexes(facts, tmp_path, which=["dense", "sparse"], encoder=first_encoder)
    assert first_encoder.passage_calls == 1
    assert isinstance(first["dense"], DenseRetriever) and isinstance(first["sparse"], BM25Retriever)
    assert [r.message.split()[0] for r in caplog.records] == ["building", "built", "building", "built"]
    assert [name.split("-")[0] for name in _dirs(tmp_path)] == ["dense", "sparse"]

    caplog.clear()
    second_encoder = CountingEncoder(encoder)
    second = load_or_build_indexes(facts, tmp_path, which=["dense", "sparse"], encoder=second_encoder)
    assert second_encoder.passage_calls == 0
    assert [r.message.split()[0] for r in caplog.records] == ["loaded", "loaded"]
    for kind in ("dense", "sparse"):
        before, after = first[kind].search(QUERIES, 5), second[kind].search(QUERIES, 5)
        np.testing.assert_array_equal(before.indices, after.indices)
        np.testing.assert_array_equal(before.scores, after.scores)


def test_hybrid_brings_dense_and_sparse_along(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    params = RetrievalParams(hybrid=HybridParams(rrf_k=10, candidates=7))
    counting = CountingEncoder(encoder)
    retrievers = load_or_build_indexes(facts, tmp_path, which=["hybrid"], params=params, encoder=counting)
    assert list(retrievers) == ["dense", "sparse", "hybrid"]
    hybrid = retrievers["hybrid"]
    assert isinstance(hybrid, HybridRetriever) and (hybrid.rrf_k, hybrid.candidates) == (10, 7)
    assert hybrid.dense is retrievers["dense"] and hybrid.sparse is retrievers["sparse"]
    assert counting.passage_calls == 1 and len(_dirs(tmp_path)) == 2
    assert facts[hybrid.search(["VX-1234 spectrometer"], 1).indices[0, 0]].title == "Device VX-1234"


def test_flat_and_hnsw_get_their_own_entries(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    counting = CountingEncoder(encoder)
    flat = load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=counting)["dense"]
    hnsw = load_or_build_indexes(facts, tmp_path, which=["dense"], params=HNSW, encoder=counting)["dense"]
    assert counting.passage_calls == 2
    assert (flat.index_type, hnsw.index_type) == ("flat", "hnsw")
    assert [d.split("-")[:2] for d in _dirs(tmp_path)] == [["dense", "flat"], ["dense", "hnsw"]]
    # HNSW build settings shape the graph, so they select another entry.
    other_m = RetrievalParams(dense=DenseParams(index="hnsw", hnsw_m=8))
    load_or_build_indexes(facts, tmp_path, which=["dense"], params=other_m, encoder=counting)
    assert counting.passage_calls == 3 and len(_dirs(tmp_path)) == 3


def test_changing_ef_search_loads_the_same_graph(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    counting = CountingEncoder(encoder)
    load_or_build_indexes(facts, tmp_path, which=["dense"], params=HNSW, encoder=counting)
    wider = RetrievalParams(dense=DenseParams(index="hnsw", ef_search=300))
    dense = load_or_build_indexes(facts, tmp_path, which=["dense"], params=wider, encoder=counting)["dense"]
    assert counting.passage_calls == 1 and len(_dirs(tmp_path)) == 1
    assert isinstance(dense, DenseRetriever) and dense.ef_search == 300


def test_changed_corpus_gets_a_new_cache_entry(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    counting = CountingEncoder(encoder)
    load_or_build_indexes(facts, tmp_path, which=["dense", "sparse"], encoder=counting)
    original = _dirs(tmp_path)
    edited = facts[:-1] + [Passage(facts[-1].id, facts[-1].title, facts[-1].text + " Edited.")]
    retrievers = load_or_build_indexes(edited, tmp_path, which=["dense", "sparse"], encoder=counting)
    assert counting.passage_calls == 2
    assert len(_dirs(tmp_path)) == 4 and set(original) < set(_dirs(tmp_path))
    assert retrievers["sparse"].search(["edited"], 1).indices.tolist() == [[len(facts) - 1]]


def test_fingerprint_sees_ids_contents_and_order(facts: list[Passage]) -> None:
    base = corpus_fingerprint(facts)
    assert base == corpus_fingerprint(list(facts))
    renamed = [Passage("other-id", facts[0].title, facts[0].text), *facts[1:]]
    retitled = [Passage(facts[0].id, "Other title", facts[0].text), *facts[1:]]
    # Moving text between title and body changes contents, so the fingerprint too.
    split_moved = [Passage("a", "x y", "z"), Passage("b", "x", "y z")]
    assert len({base, corpus_fingerprint(renamed), corpus_fingerprint(retitled), corpus_fingerprint(facts[::-1])}) == 4
    assert corpus_fingerprint(split_moved) != corpus_fingerprint(split_moved[::-1])


def test_parameters_select_their_own_entries(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    for sparse in (SparseParams(), SparseParams(k1=1.2), SparseParams(b=0.5)):
        load_or_build_indexes(facts, tmp_path, which=["sparse"], params=RetrievalParams(sparse=sparse))
    assert len(_dirs(tmp_path)) == 3

    plain = CountingEncoder(encoder)
    load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=plain)
    # The query prefix is applied at search time, so it reuses the stored vectors ...
    query_prefixed = CountingEncoder(encoder, query_prefix="query: ")
    load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=query_prefixed)
    assert query_prefixed.passage_calls == 0
    # ... while a passage prefix changes them.
    passage_prefixed = CountingEncoder(encoder, passage_prefix="passage: ")
    load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=passage_prefixed)
    assert passage_prefixed.passage_calls == 1
    assert len([d for d in _dirs(tmp_path) if d.startswith("dense-")]) == 2


def test_the_encoder_comes_from_params_when_not_given(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[DenseParams] = []

    def make_encoder(params: DenseParams, cache_dir: Path) -> CountingEncoder:
        asked.append(params)
        return CountingEncoder(encoder, passage_prefix=params.passage_prefix)

    monkeypatch.setattr(cache_module, "_make_encoder", make_encoder)
    dense_params = DenseParams(passage_prefix="passage: ", batch_size=8)
    load_or_build_indexes(facts, tmp_path, which=["dense"], params=RetrievalParams(dense=dense_params))
    assert asked == [dense_params]


def test_sparse_only_never_loads_an_encoder(
    tmp_path: Path, facts: list[Passage], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_encoder(params: DenseParams, cache_dir: Path) -> None:
        raise AssertionError("the encoder must not be loaded for a sparse-only request")

    monkeypatch.setattr(cache_module, "_make_encoder", no_encoder)
    retrievers = load_or_build_indexes(facts, tmp_path, which=("sparse",))
    assert list(retrievers) == ["sparse"]


def test_an_existing_index_file_is_served_and_not_cached(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    index = faiss.IndexFlatIP(encoder.dimension)
    index.add(encoder.encode_passages([p.contents for p in facts]))
    faiss.write_index(index, str(tmp_path / "e5_Flat.index"))
    cache_dir = tmp_path / "cache"
    params = RetrievalParams(dense=DenseParams(index_path=str(tmp_path / "e5_Flat.index")))
    counting = CountingEncoder(encoder)
    caplog.set_level(logging.INFO, logger="rollout.retrieval.cache")
    dense = load_or_build_indexes(facts, cache_dir, which=["dense"], params=params, encoder=counting)["dense"]
    assert counting.passage_calls == 0 and _dirs(cache_dir) == []
    assert "existing file" in caplog.records[-1].message
    assert facts[dense.search(["deepest lake"], 1).indices[0, 0]].title == "Lake Baikal"
    with pytest.raises(RetrievalError, match=r"e5_Flat\.index holds 12 vectors but corpus facts\.jsonl has 11"):
        load_or_build_indexes(facts[:-1], cache_dir, which=["dense"], params=params, encoder=counting,
                              corpus_path="facts.jsonl")


def test_a_failed_write_leaves_no_cache_behind(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_save = DenseRetriever.save

    def crash_after_writing(self: DenseRetriever, path: Path) -> None:
        real_save(self, path)
        raise OSError("disk full")

    monkeypatch.setattr(DenseRetriever, "save", crash_after_writing)
    with pytest.raises(OSError, match="disk full"):
        load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=encoder)
    assert _dirs(tmp_path) == []

    monkeypatch.undo()
    load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=encoder)
    assert [d.split("-")[0] for d in _dirs(tmp_path)] == ["dense"]


def _entry(cache_dir: Path, kind: str) -> Path:
    (entry,) = (p for p in cache_dir.iterdir() if p.name.startswith(kind))
    return entry


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _rebuilt_after(damage, tmp_path: Path, facts: list[Passage], caplog: pytest.LogCaptureFixture, *,
                   kind: str, params: RetrievalParams | None = None, encoder=None) -> str:
    """Build, damage the cache entry, load again: the index is rebuilt and searches as before. The warning."""
    first = load_or_build_indexes(facts, tmp_path, which=[kind], params=params, encoder=encoder)[kind]
    expected = first.search(QUERIES, 3).indices  # before the damage: a built index may map the files it wrote
    damaged = damage(_entry(tmp_path, kind))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rollout.retrieval.cache"):
        again = load_or_build_indexes(facts, tmp_path, which=[kind], params=params, encoder=encoder)[kind]
    np.testing.assert_array_equal(expected, again.search(QUERIES, 3).indices)
    assert [d for d in _dirs(tmp_path) if not d.startswith(kind)] == []  # no leftovers beside the new entry
    assert str(_entry(tmp_path, kind)) in caplog.text and "rebuilding" in caplog.text
    assert damaged is None or str(damaged.name) in caplog.text or "passages" in caplog.text
    return caplog.text


def test_a_corrupt_or_truncated_faiss_file_is_rebuilt_with_a_warning(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    def truncate(entry: Path) -> Path:
        _truncate(entry / "index.faiss")
        return entry / "index.faiss"

    _rebuilt_after(truncate, tmp_path / "flat", facts, caplog, kind="dense", encoder=encoder)

    def garbage(entry: Path) -> Path:
        (entry / "index.faiss").write_bytes(b"garbage")
        return entry / "index.faiss"

    _rebuilt_after(garbage, tmp_path / "hnsw", facts, caplog, kind="dense", params=HNSW, encoder=encoder)


def test_a_faiss_file_disagreeing_with_its_meta_is_named(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage]
) -> None:
    load_or_build_indexes(facts, tmp_path, which=["dense"], encoder=encoder)
    entry = _entry(tmp_path, "dense")
    DenseRetriever.from_vectors(np.eye(encoder.dimension, dtype=np.float32)[:3], encoder=encoder).save(tmp_path / "x")
    (tmp_path / "x" / "index.faiss").replace(entry / "index.faiss")
    with pytest.raises(RetrievalError, match=f"dense index at {entry} holds 3 .*meta.json says {len(facts)}"):
        DenseRetriever.load(entry, encoder=encoder)


@pytest.mark.parametrize(("backend", "file"), [
    *(("bm25s", f) for f in ("indices.csc.index.npy", "indptr.csc.index.npy", "data.csc.index.npy",
                             "vocab.index.json", "meta.json")),
    *(("rank_bm25", f) for f in ("token_ids.npy", "offsets.npy", "vocab.json")),
])
def test_a_truncated_bm25_file_is_rebuilt_with_a_warning(
    tmp_path: Path, facts: list[Passage], caplog: pytest.LogCaptureFixture, backend: str, file: str
) -> None:
    def truncate(entry: Path) -> Path:
        _truncate(entry / file)
        return entry / file

    params = RetrievalParams(sparse=SparseParams(backend=backend))
    _rebuilt_after(truncate, tmp_path, facts, caplog, kind="sparse", params=params)


def test_bm25s_passage_ids_out_of_range_are_named_and_rebuilt(
    tmp_path: Path, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    def out_of_range(entry: Path) -> None:
        ids = np.load(entry / "indices.csc.index.npy")
        ids[-1] = len(facts) + 5
        np.save(entry / "indices.csc.index.npy", ids)
        with pytest.raises(RetrievalError, match=f"bm25s index at {entry} is corrupt: passage ids outside"):
            BM25Retriever.load(entry)

    text = _rebuilt_after(out_of_range, tmp_path, facts, caplog, kind="sparse")
    assert "passage ids outside" in text


def test_bm25s_vocabulary_disagreeing_with_the_matrix_is_named(tmp_path: Path, facts: list[Passage]) -> None:
    BM25Retriever.build(facts).save(tmp_path)
    vocab = json.loads((tmp_path / "vocab.index.json").read_text())
    vocab["zzz-extra"] = len(vocab)
    (tmp_path / "vocab.index.json").write_text(json.dumps(vocab))
    with pytest.raises(RetrievalError, match="corrupt: the vocabulary holds"):
        BM25Retriever.load(tmp_path)


def test_rank_bm25_token_ids_out_of_range_are_named(tmp_path: Path, facts: list[Passage]) -> None:
    BM25Retriever.build(facts, SparseParams(backend="rank_bm25")).save(tmp_path)
    ids = np.load(tmp_path / "token_ids.npy")
    ids[0] = 10**6
    np.save(tmp_path / "token_ids.npy", ids)
    with pytest.raises(RetrievalError, match="token ids outside its vocab.json"):
        BM25Retriever.load(tmp_path)


def test_a_cached_index_of_another_corpus_size_is_rebuilt(
    tmp_path: Path, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    def other_corpus(entry: Path) -> None:
        shutil.rmtree(entry)
        BM25Retriever.build(facts[:-2]).save(entry)

    text = _rebuilt_after(other_corpus, tmp_path, facts, caplog, kind="sparse")
    assert f"holds {len(facts) - 2} passages, the corpus has {len(facts)}" in text


@pytest.mark.parametrize(
    ("which", "message"), [(["bm25"], r"choose from \['dense', 'sparse', 'hybrid'\]"), ([], "no index")]
)
def test_bad_which_lists_the_choices(tmp_path: Path, facts: list[Passage], which: list[str], message: str) -> None:
    with pytest.raises(RetrievalError, match=message):
        load_or_build_indexes(facts, tmp_path, which=which)


def test_empty_corpus_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match="corpus is empty"):
        load_or_build_indexes([], tmp_path, which=["sparse"])


_BUILD_AND_HANG = """
import sys, time
from pathlib import Path
import rollout.retrieval.bm25_build as bm25_build
from rollout.records import Passage
from rollout.retrieval import load_or_build_indexes

def hang(spill, *args):  # tokenized and spilled: the scores are never written
    assert any(spill.iterdir())
    Path(sys.argv[2]).write_text("building")
    time.sleep(600)

bm25_build._write_scores = hang
passages = [Passage(f"p{i}", "Title", f"passage number {i} about lakes") for i in range(50)]
load_or_build_indexes(passages, Path(sys.argv[1]), which=["sparse"])
"""


def _build_in_the_middle(cache_dir: Path, marker: Path) -> tuple[subprocess.Popen, set[Path]]:
    """A process building a BM25 index, stopped once its chunks are spilled; the temporaries that appeared for it."""
    return stopped_halfway(_BUILD_AND_HANG, [str(cache_dir), str(marker)], marker, cache_dir)


def test_a_killed_builds_temporaries_are_removed_and_a_live_builds_kept(
    tmp_path: Path, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    live, live_temps = _build_in_the_middle(cache_dir, tmp_path / "live")
    try:
        killed, killed_temps = _build_in_the_middle(cache_dir, tmp_path / "killed")
        killed.kill()
        killed.wait()
        (killed_temp,) = killed_temps
        assert killed_temp.name.startswith(".tmp-sparse-") and (killed_temp / ".spill").is_dir()
        with caplog.at_level(logging.INFO, logger="rollout"):
            load_or_build_indexes(facts, cache_dir, which=["sparse"])
        assert set(cache_dir.glob(".tmp-*")) == live_temps, "the killed build's folder is removed, the live one's kept"
        assert killed_temp.name in caplog.text
    finally:
        live.kill()
        live.wait()
