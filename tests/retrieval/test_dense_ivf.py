"""The `ivf` dense index kind: layout rules, save/load (mapped), search against faiss and numpy, cache keys, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.data import generate_demo_kb
from rollout.errors import RetrievalError
from rollout.identity_keys import is_identity_key
from rollout.records import Passage
from rollout.retrieval import DenseParams, DenseRetriever, RetrievalParams, load_or_build_indexes
from rollout.retrieval.cache import dense_cache_params
from rollout.retrieval.dense_ivf import MIN_POINTS_PER_CENTROID, plan_ivf
from rollout.retrieval.encoder import TextEncoder

MakeVectors = Callable[[int, int, int], np.ndarray]
IVF = DenseParams(index="ivf")


def _clustered(n: int, dimension: int, seed: int) -> np.ndarray:
    """Unit vectors around 20 random centres, so inverted lists have something to separate."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dimension))
    vectors = centres[rng.integers(0, 20, size=n)] + 0.6 * rng.standard_normal((n, dimension))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _mapped_files() -> set[str]:
    with open("/proc/self/maps", encoding="utf-8") as f:
        return {line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6}


def test_layout_follows_the_documented_rules() -> None:
    big = plan_ivf(1_000_000, 384, IVF)
    assert big.nlist == 4000 and big.train_size == 64 * 4000 and (big.pq_m, big.pq_nbits) == (0, 0)
    demo = plan_ivf(2000, 384, DenseParams(index="ivf", ivf_pq_m=48))
    # 4 x sqrt(2000) = 179 lists would leave 11 passages each; clamped to 39 per list.
    assert demo.nlist == 2000 // MIN_POINTS_PER_CENTROID == 51 and demo.train_size == 2000
    assert demo.pq_nbits == 5  # 2^5 code words x 39 points <= 2000 < 2^6 x 39
    assert plan_ivf(10, 384, IVF).nlist == 1
    assert plan_ivf(100_000, 384, DenseParams(index="ivf", ivf_nlist=256, ivf_pq_m=96)).pq_nbits == 8


@pytest.mark.parametrize(("n", "pq_m"), [(5, 0), (60, 0), (2000, 0), (100, 4), (2000, 8)])
def test_small_corpora_train_without_faiss_warnings(
    capfd: pytest.CaptureFixture[str], n: int, pq_m: int
) -> None:
    vectors = _clustered(n, 32, 1)
    retriever = DenseRetriever.from_vectors(vectors, encoder=None, params=DenseParams(index="ivf", ivf_pq_m=pq_m))
    assert retriever.index_type == "ivf" and retriever.num_passages == n
    hits = retriever.search_vectors(vectors[:3], 3)
    assert (hits.indices[:, 0] >= 0).all()
    assert "WARNING" not in capfd.readouterr().err  # faiss prints its clustering warnings to stderr


def test_ivf_saves_loads_mapped_and_searches_as_faiss_does(tmp_path: Path) -> None:
    vectors, queries = _clustered(3000, 32, 2), _clustered(40, 32, 3)
    built = DenseRetriever.from_vectors(vectors, encoder=None, params=DenseParams(index="ivf", ivf_nprobe=3))
    built.save(tmp_path)
    loaded = DenseRetriever.load(tmp_path, encoder=None, params=DenseParams(index="ivf", ivf_nprobe=5))
    assert str(tmp_path / "index.faiss") in _mapped_files()
    assert loaded.index_type == "ivf" and loaded.nprobe == 5 and loaded.num_passages == 3000

    # faiss' own search of the same file read into memory, at the same nprobe.
    reference = faiss.read_index(str(tmp_path / "index.faiss"))
    reference.nprobe = 5
    ref_scores, ref_ids = reference.search(queries, 10)
    hits = loaded.search_vectors(queries, 10)
    np.testing.assert_array_equal(hits.indices, ref_ids)
    np.testing.assert_allclose(hits.scores, ref_scores, rtol=1e-6)

    # And what IVF means: exact search over the vectors of the nprobe lists nearest each query.
    ivf = faiss.extract_index_ivf(reference)
    _, lists_of_vectors = ivf.quantizer.search(vectors, 1)
    _, probed = ivf.quantizer.search(queries, 5)
    for q, lists in enumerate(probed):
        candidates = np.flatnonzero(np.isin(lists_of_vectors[:, 0], lists))
        scores = vectors[candidates] @ queries[q]
        top = candidates[np.argsort(-scores, kind="stable")[:10]]
        np.testing.assert_array_equal(hits.indices[q], top)


def test_nprobe_on_an_ivf_pq_file_and_the_meta(tmp_path: Path) -> None:
    vectors = _clustered(2000, 32, 4)
    DenseRetriever.from_vectors(vectors, encoder=None, params=DenseParams(index="ivf", ivf_pq_m=8)).save(tmp_path)
    meta = (tmp_path / "meta.json").read_text(encoding="utf-8")
    assert '"index": "ivf"' in meta and '"ivf_pq_m": 8' in meta and '"ivf_nlist": 51' in meta
    loaded = DenseRetriever.load(tmp_path, encoder=None, params=DenseParams(ivf_nprobe=51))
    assert isinstance(faiss.downcast_index(faiss.extract_index_ivf(loaded._index)), faiss.IndexIVFPQ)
    # All lists probed: PQ codes only approximate the vectors, but a vector is still its own best match.
    assert (loaded.search_vectors(vectors[:50], 1).indices[:, 0] == np.arange(50)).mean() >= 0.9


@pytest.fixture(scope="module")
def demo_vectors(cache_dir: Path, encoder: TextEncoder) -> tuple[np.ndarray, np.ndarray]:
    """The demo knowledge base's 2,000 passages as the session's demo runs index them (encoding them is most of
    this test's cost, so it is done once, here or by a run), and its 200 questions encoded."""
    passages, questions = generate_demo_kb(n_passages=2000, n_questions=200, seed=0)
    flat = load_or_build_indexes(passages, cache_dir, which=["dense"])["dense"]
    assert isinstance(flat, DenseRetriever)
    return flat._index.reconstruct_n(0, flat._index.ntotal), encoder.encode_queries([q.question for q in questions])


def test_all_lists_probed_on_the_demo_kb_equals_flat(demo_vectors: tuple[np.ndarray, np.ndarray]) -> None:
    passages, questions = demo_vectors
    flat = DenseRetriever.from_vectors(passages, encoder=None)
    ivf = DenseRetriever.from_vectors(passages, encoder=None, params=IVF)
    nlist = faiss.extract_index_ivf(ivf._index).nlist
    assert nlist == 51
    exact, default = flat.search_vectors(questions, 10), ivf.search_vectors(questions, 10)
    ivf.nprobe = nlist
    every_list = ivf.search_vectors(questions, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact.indices, every_list.indices, strict=True)])
    assert recall == 1.0
    np.testing.assert_allclose(every_list.scores, exact.scores, atol=1e-5)
    # The default nprobe (32 of 51 lists) loses little here; fewer lists lose more.
    default_recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact.indices, default.indices, strict=True)])
    ivf.nprobe = 1
    one = ivf.search_vectors(questions, 10)
    one_recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact.indices, one.indices, strict=True)])
    assert 1.0 >= default_recall > one_recall


class _Named:
    model_id = "m"
    passage_prefix = ""
    dimension = 8


def test_cache_key_follows_nlist_and_pq_but_not_nprobe() -> None:
    def key(**kw: object) -> dict[str, object]:
        return dense_cache_params(DenseParams(index="ivf", **kw), _Named())  # type: ignore[arg-type]

    base = key()
    assert key(ivf_nprobe=200) == base
    assert key(ivf_nlist=64) != base and key(ivf_pq_m=8) != base and key(ivf_nlist=64) != key(ivf_nlist=65)
    assert dense_cache_params(DenseParams(index="flat"), _Named()) != base  # type: ignore[arg-type]
    # nprobe changes results, so like ef_search it is part of a run's identity.
    for field in ("ivf_nprobe", "ivf_nlist", "ivf_pq_m", "ef_search"):
        assert is_identity_key(f"retriever.dense.{field}", uses_llm=False)


def test_changing_nprobe_loads_the_same_lists(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    first = load_or_build_indexes(facts, tmp_path, which=["dense"], params=RetrievalParams(dense=IVF), encoder=encoder)
    wider = RetrievalParams(dense=DenseParams(index="ivf", ivf_nprobe=7))
    second = load_or_build_indexes(facts, tmp_path, which=["dense"], params=wider, encoder=encoder)["dense"]
    other = RetrievalParams(dense=DenseParams(index="ivf", ivf_pq_m=0, ivf_nlist=1))
    load_or_build_indexes(facts, tmp_path, which=["dense"], params=other, encoder=encoder)
    assert first["dense"].index_type == "ivf" and isinstance(second, DenseRetriever) and second.nprobe == 7
    assert len([d for d in tmp_path.iterdir() if d.name.startswith("dense-ivf-")]) == 2


@pytest.mark.parametrize(
    ("params", "n", "message"),
    [
        (DenseParams(index="ivf", ivf_nlist=0), 100, "ivf_nlist=0: use null"),
        (DenseParams(index="ivf", ivf_nlist=-3), 100, "ivf_nlist=-3"),
        (DenseParams(index="ivf", ivf_nprobe=0), 100, "ivf_nprobe=0: use a positive integer"),
        (DenseParams(index="ivf", ivf_pq_m=-1), 100, "ivf_pq_m=-1: use 0"),
        (DenseParams(index="ivf", ivf_pq_m=5), 100, r"ivf_pq_m=5 does not divide the vector width 8; use one of \[1, 2, 4, 8\]"),
        (DenseParams(index="ivf", ivf_pq_m=4), 50, "at least 78 passages.*ivf_pq_m=0"),
    ],
)
def test_invalid_ivf_settings_are_one_clear_error(params: DenseParams, n: int, message: str) -> None:
    with pytest.raises(RetrievalError, match=message):
        DenseRetriever.from_vectors(_clustered(n, 8, 5), encoder=None, params=params)


def test_config_section_names_ivf_among_the_choices() -> None:
    with pytest.raises(RetrievalError, match="use flat, hnsw or ivf"):
        RetrievalParams.from_dict({"dense": {"index": "ivff"}})
    params = RetrievalParams.from_dict({"dense": {"index": "ivf", "ivf_nlist": 8, "ivf_nprobe": 2, "ivf_pq_m": 4}})
    assert (params.dense.ivf_nlist, params.dense.ivf_nprobe, params.dense.ivf_pq_m) == (8, 2, 4)
