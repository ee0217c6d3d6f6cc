import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from rollout.data.records import Passage
from rollout.retrieval import BM25Retriever, DenseRetriever, Encoder, RetrievalError, load_or_build_indexes
from rollout.retrieval import cache as cache_module
from rollout.retrieval.cache import corpus_fingerprint

MakeQueries = Callable[[int, int], list[str]]
QUERIES = ["birthplace of Ravel", "VX-1234 spectrometer", "deepest lake", "train in the Alps"]


class CountingEncoder:
    """Delegates to the session encoder and counts how often passages are encoded."""

    def __init__(self, inner: Encoder, *, passage_prefix: str = "", query_prefix: str = "") -> None:
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
    tmp_path: Path, encoder: Encoder, facts: list[Passage], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rollout.retrieval.cache")
    first_encoder = CountingEncoder(encoder)
    first = load_or_build_indexes(facts, tmp_path, encoder=first_encoder)
    assert first_encoder.passage_calls == 1
    assert isinstance(first["dense"], DenseRetriever) and isinstance(first["sparse"], BM25Retriever)
    assert [r.message.split()[0] for r in caplog.records] == ["built", "built"]
    assert [name.split("-")[0] for name in _dirs(tmp_path)] == ["dense", "sparse"]

    caplog.clear()
    second_encoder = CountingEncoder(encoder)
    second = load_or_build_indexes(facts, tmp_path, encoder=second_encoder)
    assert second_encoder.passage_calls == 0
    assert first_encoder.passage_calls == 1
    assert [r.message.split()[0] for r in caplog.records] == ["loaded", "loaded"]
    for kind in ("dense", "sparse"):
        before, after = first[kind].search(QUERIES, 5), second[kind].search(QUERIES, 5)
        np.testing.assert_array_equal(before.indices, after.indices)
        np.testing.assert_array_equal(before.scores, after.scores)


def test_changed_corpus_gets_a_new_cache_entry(tmp_path: Path, encoder: Encoder, facts: list[Passage]) -> None:
    counting = CountingEncoder(encoder)
    load_or_build_indexes(facts, tmp_path, encoder=counting)
    original = _dirs(tmp_path)
    edited = facts[:-1] + [Passage(facts[-1].id, facts[-1].title, facts[-1].text + " Edited.")]
    retrievers = load_or_build_indexes(edited, tmp_path, encoder=counting)
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


def test_parameters_select_their_own_entries(tmp_path: Path, encoder: Encoder, facts: list[Passage]) -> None:
    load_or_build_indexes(facts, tmp_path, which=["sparse"])
    load_or_build_indexes(facts, tmp_path, which=["sparse"], bm25_k1=1.2)
    load_or_build_indexes(facts, tmp_path, which=["sparse"], bm25_b=0.5)
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


def test_sparse_only_never_loads_an_encoder(
    tmp_path: Path, facts: list[Passage], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_encoder() -> None:
        raise AssertionError("the encoder must not be loaded for a sparse-only request")

    monkeypatch.setattr(cache_module, "Encoder", no_encoder)
    retrievers = load_or_build_indexes(facts, tmp_path, which=("sparse",))
    assert list(retrievers) == ["sparse"]


def test_a_failed_write_leaves_no_cache_behind(
    tmp_path: Path, facts: list[Passage], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_save = BM25Retriever.save

    def crash_after_writing(self: BM25Retriever, path: Path) -> None:
        real_save(self, path)
        raise OSError("disk full")

    monkeypatch.setattr(BM25Retriever, "save", crash_after_writing)
    with pytest.raises(OSError, match="disk full"):
        load_or_build_indexes(facts, tmp_path, which=["sparse"])
    assert _dirs(tmp_path) == []

    monkeypatch.undo()
    load_or_build_indexes(facts, tmp_path, which=["sparse"])
    assert [d.split("-")[0] for d in _dirs(tmp_path)] == ["sparse"]


def test_an_unreadable_entry_says_to_delete_it(tmp_path: Path, facts: list[Passage]) -> None:
    load_or_build_indexes(facts, tmp_path, which=["sparse"])
    (entry,) = tmp_path.iterdir()
    (entry / "token_ids.npy").write_bytes(b"garbage")
    with pytest.raises(RetrievalError, match=f"{entry}.*delete that directory"):
        load_or_build_indexes(facts, tmp_path, which=["sparse"])


@pytest.mark.parametrize(("which", "message"), [(["bm25"], r"choose from \['dense', 'sparse'\]"), ([], "no index")])
def test_bad_which_lists_the_choices(tmp_path: Path, facts: list[Passage], which: list[str], message: str) -> None:
    with pytest.raises(RetrievalError, match=message):
        load_or_build_indexes(facts, tmp_path, which=which)


def test_empty_corpus_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match="corpus is empty"):
        load_or_build_indexes([], tmp_path, which=["sparse"])
