"""A dense index in S row-range shards (`rollout.retrieval.dense_shards`): flat shards answer bit for bit as the whole
index, through the cache, from an existing file, and in a whole demo run; approximate shards join the identity."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.data import open_corpus
from rollout.data.dataset import prepare_data
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import DenseParams, DenseRetriever, Hits, RetrievalParams, load_or_build_indexes
from rollout.retrieval.dense_shards import (
    ShardedDenseRetriever,
    build_shards_into,
    merge_hits,
    shard_ranges,
    split_index_into,
)
from rollout.run.config import compose_run_config
from rollout.run.identity import identity_settings
from rollout.run_folder import iter_trajectory, read_config
from tests.demo_runs import SMALL_KB, DemoRuns


class _Vectors:
    """Stands in for an encoder where an index of precomputed vectors needs one."""

    model_id = "vectors"
    passage_prefix = ""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        raise AssertionError("these tests search vectors")


class _WordsEncoder:
    """A fast encoder double: a text's vector is the normalised sum of fixed random vectors of its words."""

    model_id = "words"
    passage_prefix = ""
    dimension = 32

    def _encode(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for word in text.lower().split():
                seed = int.from_bytes(word.encode()[:8].ljust(8, b"_"), "little")
                row += np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
        rows[~rows.any(axis=1), 0] = 1.0
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def encode_passages(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        return self._encode(texts)

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        return self._encode(queries)


def _same(got: Hits, want: Hits) -> None:
    """The same rows and scores, bit for bit; rows of one exact score in row order (faiss' heap leaves tied rows in
    any order, the merge puts the lower first)."""
    padded = np.where(want.indices < 0, np.iinfo(np.int64).max, want.indices)
    order = np.lexsort((padded, -want.scores), axis=-1)
    np.testing.assert_array_equal(got.indices, np.take_along_axis(want.indices, order, axis=1))
    np.testing.assert_array_equal(got.scores, want.scores)


def test_flat_shards_answer_bit_for_bit_as_the_whole_index(tmp_path: Path, unit_vectors) -> None:
    vectors, queries = unit_vectors(9000, 48, 0), unit_vectors(64, 48, 1)
    whole = DenseRetriever.from_vectors(vectors, encoder=None)
    for shards in (2, 3, 7):
        ranges = shard_ranges(len(vectors), shards)
        assert ranges[0][0] == 0 and ranges[-1][1] == len(vectors) and len(ranges) == shards
        assert all(a[1] == b[0] and a[1] % 1024 == 0 for a, b in zip(ranges, ranges[1:], strict=False))
        built = build_shards_into(tmp_path / f"built{shards}", lambda a, b: vectors[a:b], len(vectors),
                                  encoder=_Vectors(48), params=DenseParams(shards=shards, max_query_batch=1))
        split = split_index_into(tmp_path / f"split{shards}", whole.faiss_index, "whole", encoder=_Vectors(48),
                                 params=DenseParams(shards=shards, max_query_batch=1))
        for retriever in (built, split):
            assert retriever.num_passages == len(vectors) and len(retriever.shards) == shards
            for k in (1, 10, len(vectors) + 5):  # past the corpus: padded as the whole index pads
                _same(retriever.search_vectors(queries, k), whole.search_vectors(queries, k))
            retriever.close()
    # An id-mapped flat index (Tevatron's, labelled by corpus row) keeps its labels in every shard.
    labelled = faiss.IndexIDMap(faiss.IndexFlatIP(48))
    labelled.add_with_ids(vectors, np.random.default_rng(2).permutation(len(vectors)).astype(np.int64) * 3)
    by_label = DenseRetriever(labelled, None)
    split = split_index_into(tmp_path / "labelled", labelled, "labelled", encoder=_Vectors(48),
                             params=DenseParams(shards=3, max_query_batch=1))
    _same(split.search_vectors(queries, 10), by_label.search_vectors(queries, 10))
    # Too small to align on faiss' 1,024-row blocks: even ranges, and scores within float32 rounding.
    small = DenseRetriever.from_vectors(vectors[:50], encoder=None)
    assert shard_ranges(50, 3) == [(0, 16), (16, 33), (33, 50)]
    cut = split_index_into(tmp_path / "small", small.faiss_index, "small", encoder=_Vectors(48),
                           params=DenseParams(shards=3, max_query_batch=1))
    got, want = cut.search_vectors(queries, 10), small.search_vectors(queries, 10)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-6)


def test_merging_keeps_the_best_ties_to_the_lower_row_and_padding_last() -> None:
    first = Hits(np.array([[7, 2, -1]]), np.array([[0.9, 0.5, -np.inf]], dtype=np.float32))
    second = Hits(np.array([[1, 9, 4]]), np.array([[0.5, 0.5, 0.1]], dtype=np.float32))
    merged = merge_hits([first, second], 4)
    assert merged.indices.tolist() == [[7, 1, 2, 9]]
    assert merged.scores[0].tolist() == pytest.approx([0.9, 0.5, 0.5, 0.5])
    padded = merge_hits([Hits(np.array([[3, -1]]), np.array([[0.2, -np.inf]], dtype=np.float32))], 3)
    assert padded.indices.tolist() == [[3, -1, -1]] and np.isneginf(padded.scores[0, 1:]).all()


def test_shards_through_the_cache_from_the_corpus_and_from_a_file(tmp_path: Path, random_passages,
                                                                 random_queries) -> None:
    encoder = _WordsEncoder()
    passages: list[Passage] = random_passages(2500, 3)
    queries = random_queries(40, 4)
    cache = tmp_path / "cache"

    def dense(**settings) -> DenseRetriever | ShardedDenseRetriever:
        params = RetrievalParams.from_dict({"dense": {"max_query_batch": 1, **settings}})
        return load_or_build_indexes(passages, cache, which=["dense"], params=params, encoder=encoder)["dense"]

    whole = dense()
    want = whole.search(queries, 10)
    two = dense(shards=2)
    assert isinstance(two, ShardedDenseRetriever) and [s.retriever.num_passages for s in two.shards] == [1024, 1476]
    _same(two.search(queries, 10), want)
    entries = sorted(p.name for p in cache.iterdir() if p.name.startswith("dense-"))
    assert any(name.startswith("dense-flat-s2-") for name in entries), entries
    info = json.loads((cache / next(n for n in entries if "-s2-" in n) / "cache_info.json").read_text())
    assert info["params"]["shards"] == 2
    _same(dense(shards=2).search(queries, 10), want)  # loaded from the cache: no new entry
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith("dense-")) == entries

    # An existing flat file is split once into the cache, keyed by the file and S.
    path = tmp_path / "e5_Flat.index"
    faiss.write_index(whole.faiss_index, str(path))
    split = dense(index_path=str(path), shards=3)
    _same(split.search(queries, 10), want)
    assert len([p for p in cache.iterdir() if p.name.startswith("dense-split3-")]) == 1

    # Approximate shards: each shard its own index over its rows (IVF lists by the rule on n / S).
    ivf = dense(index="ivf", shards=2)
    assert ivf.index_type == "ivf" and all(s.retriever.nprobe == 32 for s in ivf.shards)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ivf.search(queries, 10).indices, want.indices,
                                                                      strict=True)])
    assert overlap > 0.9

    # Bad input: one error naming the setting and the fix.
    for settings, words in (
        ({"shards": 0}, "retriever.dense.shards=0 must be a positive integer"),
        ({"shards": "2"}, "retriever.dense.shards='2' must be a positive integer"),
        ({"shards": 2600}, "set retriever.dense.shards to at most 2500"),
    ):
        with pytest.raises(RetrievalError, match=words):
            dense(**settings)
    hnsw = faiss.IndexHNSWFlat(encoder.dimension, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(encoder.encode_passages([p.contents for p in passages]))
    faiss.write_index(hnsw, str(tmp_path / "hnsw.index"))
    with pytest.raises(RetrievalError, match="splits a flat index row by row.*IndexHNSWFlat.*shards=1"):
        dense(index_path=str(tmp_path / "hnsw.index"), shards=2)


def test_shards_join_the_identity_only_where_they_change_results() -> None:
    flat = compose_run_config("mode=dense", "retriever.dense.shards=2")
    assert "retriever.dense.shards" not in identity_settings(flat)
    assert identity_settings(flat) == identity_settings(compose_run_config("mode=dense"))
    assert "shards" not in str(flat.output_dir)
    for kind in ("hnsw", "ivf"):
        approximate = compose_run_config("mode=dense", f"retriever.dense.index={kind}", "retriever.dense.shards=2")
        assert identity_settings(approximate)["retriever.dense.shards"] == 2
        assert "retriever.dense.shards=2" in str(approximate.output_dir)


def test_a_demo_run_on_two_shards_calls_as_on_one_index(demo_runs: DemoRuns, cache_dir: Path) -> None:
    whole = list(iter_trajectory(demo_runs["dense"], full=True))
    folder = demo_runs.get("dense", "retriever.dense.shards=2").folder
    sharded = list(iter_trajectory(folder, full=True))
    assert read_config(folder)["retriever"]["dense"]["shards"] == 2
    assert any(p.name.startswith("dense-flat-s2-") for p in cache_dir.iterdir())  # the gateway served two shards
    assert len(whole) == len(sharded) == 40
    calls = 0
    for one, two in zip(sorted(whole, key=lambda t: t.id), sorted(sharded, key=lambda t: t.id), strict=True):
        assert [(c.name, c.arguments, c.result_ids) for c in one.tool_calls] == \
            [(c.name, c.arguments, c.result_ids) for c in two.tool_calls]
        # The tool results as the agent read them: the same passages, in the same order, with the same scores.
        tool_messages = [[m for m in t.messages if m.get("role") == "tool"] for t in (one, two)]
        assert tool_messages[0] == tool_messages[1]
        assert one.prediction == two.prediction
        calls += len(one.tool_calls)
    assert calls >= 40
    # Every question of the demo, searched in the gateway's two indexes (from the cache the runs filled): the same
    # rows; 400 passages are too few to cut on faiss' 1,024-row blocks, so scores agree to float32 rounding.
    cfg = compose_run_config("mode=dense", *SMALL_KB, f"cache_dir={cache_dir}")
    passages = open_corpus(prepare_data(cfg.dataset, cache_dir).corpus_path, cache_dir)
    questions = [t.question for t in whole]
    hits = [load_or_build_indexes(passages, cache_dir, which=["dense"], params=replace(
        cfg.retriever, dense=replace(cfg.retriever.dense, shards=shards)))["dense"].search(questions, 10)
        for shards in (1, 2)]
    np.testing.assert_array_equal(hits[0].indices, hits[1].indices)
    np.testing.assert_allclose(hits[0].scores, hits[1].scores, atol=1e-6)
