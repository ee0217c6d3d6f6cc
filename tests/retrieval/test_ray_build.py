"""Index builds on Ray: shards assembled into the index a single-machine build makes, and `rollout build-index` on the
local two-node cluster giving the cache entries (and the rankings) a run's own build gives."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from rollout.data import ensure_demo_kb, load_corpus, open_corpus
from rollout.paths import CONF_DIR
from rollout.retrieval import load_or_build_indexes
from rollout.retrieval.build_index import build_indexes
from rollout.retrieval.dense import DenseRetriever
from rollout.retrieval.encoder import load_encoder
from rollout.retrieval.params import DenseParams, RetrievalParams
from rollout.retrieval.ray_build import RayBuild, assemble_dense, encoder_count
from tests.conftest import with_session_encoder

QUERIES = ["Veltrix founded", "Kremes Works company", "born city", "ORG-5521"]


class UnitVectors:
    """An encoder stand-in whose passages are given: `assemble_dense` needs its dimension; queries are vectors."""

    model_id, passage_prefix, dimension = "unit", "", 16

    def encode_queries(self, texts):
        raise AssertionError("the test searches with vectors")


def shards(vectors: np.ndarray, rows: int, folder: Path) -> list[Path]:
    folder.mkdir()
    files = []
    for start in range(0, len(vectors), rows):
        files.append(folder / f"{start:012d}.npy")
        np.save(files[-1], vectors[start:start + rows])
    return files


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf", "ivf-pq"])
def test_shards_assemble_into_the_index_of_the_whole_matrix(tmp_path, index):
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    params = DenseParams(index="ivf" if index.startswith("ivf") else index, ivf_pq_m=4 if index == "ivf-pq" else 0,
                         ivf_nlist=8)
    whole = DenseRetriever.from_vectors(vectors, encoder=None, params=params)
    assembled = assemble_dense(shards(vectors, 700, tmp_path / "s"), UnitVectors(), params)  # 5 shards, the last short
    queries = vectors[::97] + 0.01
    ours, theirs = assembled.search_vectors(queries, 10), whole.search_vectors(queries, 10)
    assert assembled.num_passages == 3000 and assembled.index_type == whole.index_type
    assert np.array_equal(ours.indices, theirs.indices) and np.allclose(ours.scores, theirs.scores, atol=1e-6)


def test_encoders_follow_the_cluster_and_a_gpu_build_without_gpus_says_so(caplog):
    assert encoder_count({"CPU": 8.0}, RayBuild()) == 8
    assert encoder_count({"CPU": 8.0, "GPU": 4.0}, RayBuild(gpus_per_encoder=0.5)) == 8
    assert encoder_count({"CPU": 8.0, "GPU": 4.0}, RayBuild(encoders=3, gpus_per_encoder=1)) == 3
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="rollout.retrieval.ray_build"):
        assert encoder_count({"CPU": 8.0}, RayBuild(gpus_per_encoder=1)) == 1  # waits for GPU nodes to join
    (record,) = caplog.records
    assert "build.gpus_per_encoder=1 but the Ray cluster has 0 GPU" in record.getMessage()
    assert "build.gpus_per_encoder=0" in record.getMessage()  # the fix


@pytest.mark.slow
def test_build_index_on_two_nodes_caches_what_a_run_would_build(two_nodes, tmp_path, cache_dir, caplog):
    # The dense index in two shards: the encoding on the cluster's actors, then the shards written from it.
    cache = with_session_encoder(cache_dir, tmp_path / "ray-cache")
    overrides = [f"ray.address={two_nodes.address}", f"cache_dir={cache}", "dataset.n_passages=400",
                 "dataset.n_questions=40", "build.rows_per_shard=128", "build.encoders=2", "retriever.dense.shards=2"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("build_index", overrides=overrides)
    with caplog.at_level(logging.INFO):
        entries = build_indexes(cfg)
    assert sorted(e.name.split("-")[0] for e in entries) == ["dense", "sparse"]
    assert any(e.name.startswith("dense-flat-s2-") for e in entries)
    assert "4 shards of 128 (4 to do) on 2 encoder actor(s)" in caplog.text
    assert "Dense index in 2 shards on Ray" in caplog.text
    assert not list(cache.glob("shards-*")), "the encoded vectors are deleted once the shards are written"

    # A run's own build, in a cache of its own and in one piece, ranks alike; a run with the same settings finds
    # what build-index wrote.
    corpus = ensure_demo_kb(cache, n_passages=400, n_questions=40).corpus_path
    local_cache = with_session_encoder(cache_dir, tmp_path / "local-cache")
    local = load_or_build_indexes(load_corpus(corpus), local_cache, which=["dense", "sparse"],
                                  params=RetrievalParams())
    sharded = RetrievalParams.from_dict({"dense": {"shards": 2}})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rollout.retrieval.cache"):
        built = load_or_build_indexes(open_corpus(corpus, cache), cache, which=["dense", "sparse"], params=sharded,
                                      encoder=load_encoder(sharded.dense, cache_dir=cache))
    assert "building" not in caplog.text  # found in the cache build-index filled
    for kind in ("dense", "sparse"):
        ours, theirs = built[kind].search(QUERIES, 10), local[kind].search(QUERIES, 10)
        assert np.array_equal(ours.indices, theirs.indices), kind
        assert np.allclose(ours.scores, theirs.scores, atol=1e-5), kind
