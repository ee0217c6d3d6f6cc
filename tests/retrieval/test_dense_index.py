import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, DenseParams, DenseRetriever, Encoder, Retriever, SparseParams
from rollout.retrieval.encoder import TextEncoder

MakePassages = Callable[[int, int], list[Passage]]
MakeQueries = Callable[[int, int], list[str]]
MakeVectors = Callable[[int, int, int], np.ndarray]
HNSW = DenseParams(index="hnsw")


class FixedWidthEncoder:
    """A stand-in that only reports a width, for checks that never encode."""

    model_id = "fake"
    passage_prefix = ""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("not expected to encode")

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        raise AssertionError("not expected to encode")


@pytest.fixture(scope="module")
def random_index(encoder: TextEncoder) -> tuple[list[Passage], DenseRetriever]:
    rng = np.random.default_rng(7)
    words = "castle violin comet harbor glacier orchard quartz temple willow lantern copper meadow".split()
    passages = []
    for i in range(60):
        text = " ".join(rng.choice(words, size=int(rng.integers(3, 12))))
        passages.append(Passage(id=str(i), title=str(rng.choice(words)), text=text))
    return passages, DenseRetriever.build(passages, encoder=encoder)


def test_encoder_returns_unit_float32_rows(encoder: TextEncoder) -> None:
    vectors = encoder.encode_passages(["a first text", "another, longer text about rivers"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, encoder.dimension) == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    empty = encoder.encode_queries([])
    assert empty.dtype == np.float32 and empty.shape == (0, 384)


def test_prefixes_are_prepended(encoder: TextEncoder) -> None:
    prefixed = copy.copy(encoder)  # shares the loaded model; only the prefixes differ
    prefixed.query_prefix, prefixed.passage_prefix = "query: ", "passage: "
    np.testing.assert_allclose(
        prefixed.encode_queries(["rivers"]), encoder.encode_queries(["query: rivers"]), atol=1e-6
    )
    np.testing.assert_allclose(
        prefixed.encode_passages(["rivers"]), encoder.encode_passages(["passage: rivers"]), atol=1e-6
    )
    assert not np.allclose(prefixed.encode_queries(["rivers"]), encoder.encode_queries(["rivers"]), atol=1e-3)


@pytest.mark.parametrize("model", ["/nonexistent/model-dir", "no-such-org/no-such-model"])
def test_unloadable_model_names_the_model_and_the_fix(model: str) -> None:
    with pytest.raises(RetrievalError, match="local model directory") as info:
        Encoder(model)
    assert model in str(info.value)


def test_search_equals_numpy_brute_force(encoder: TextEncoder, random_index, random_queries: MakeQueries) -> None:
    passages, retriever = random_index
    queries = random_queries(20, 5)
    hits = retriever.search(queries, k=8)
    assert hits.indices.dtype == np.int64 and hits.scores.dtype == np.float32
    assert hits.indices.shape == hits.scores.shape == (20, 8)

    sims = encoder.encode_queries(queries) @ encoder.encode_passages([p.contents for p in passages]).T
    expected_scores = -np.sort(-sims, axis=1)[:, :8]
    np.testing.assert_allclose(hits.scores, expected_scores, atol=1e-5)
    # Each returned passage has the similarity reported beside it (robust to near-ties).
    np.testing.assert_allclose(np.take_along_axis(sims, hits.indices, axis=1), hits.scores, atol=1e-5)
    assert all(len(set(row)) == 8 for row in hits.indices.tolist())


def test_paraphrase_ranks_the_right_passage_first(encoder: TextEncoder, facts: list[Passage]) -> None:
    retriever: Retriever = DenseRetriever.build(facts, encoder=encoder)
    assert retriever.name == "dense"
    hits = retriever.search(["What is the birthplace of the composer Ravel?", "who discovered antibiotics"], k=3)
    # "birthplace" vs "was born in", and ahead of the other Ravel passage.
    assert facts[hits.indices[0, 0]].title == "Maurice Ravel"
    assert facts[hits.indices[0, 1]].title == "Bolero"
    assert facts[hits.indices[1, 0]].title == "Penicillin"
    # The second query shares no word with its passage, which BM25 cannot score at all.
    sparse = BM25Retriever.build(facts, SparseParams()).search(["who discovered antibiotics"], k=len(facts))
    assert int(hits.indices[1, 0]) not in sparse.indices[0].tolist()


def test_k_larger_than_corpus_pads_with_minus_one(encoder: TextEncoder, facts: list[Passage]) -> None:
    retriever = DenseRetriever.build(facts[:3], encoder=encoder)
    hits = retriever.search(["Ravel", "bees"], k=5)
    assert hits.indices.shape == (2, 5)
    assert all(sorted(row[:3]) == [0, 1, 2] for row in hits.indices.tolist())
    assert np.all(hits.indices[:, 3:] == -1)
    assert np.all(np.isneginf(hits.scores[:, 3:]))
    assert np.all(hits.scores[:, :-1] >= hits.scores[:, 1:])


def test_no_queries(random_index) -> None:
    hits = random_index[1].search([], k=4)
    assert hits.indices.shape == hits.scores.shape == (0, 4)


def test_save_load_round_trip(tmp_path: Path, encoder: TextEncoder, random_index, random_queries: MakeQueries) -> None:
    _, original = random_index
    original.save(tmp_path / "dense")
    assert json.loads((tmp_path / "dense" / "meta.json").read_text())["num_passages"] == 60
    loaded = DenseRetriever.load(tmp_path / "dense", encoder=encoder)
    queries = random_queries(6, 9)
    before, after = original.search(queries, 4), loaded.search(queries, 4)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_array_equal(before.scores, after.scores)


def test_load_with_an_encoder_of_another_width_is_an_error(tmp_path: Path, random_index) -> None:
    random_index[1].save(tmp_path)
    with pytest.raises(RetrievalError, match="384-d .* 8-d"):
        DenseRetriever.load(tmp_path, encoder=FixedWidthEncoder(8))


def test_load_from_missing_directory_says_how_to_build(tmp_path: Path, encoder: TextEncoder) -> None:
    with pytest.raises(RetrievalError, match=r"DenseRetriever\.build"):
        DenseRetriever.load(tmp_path, encoder=encoder)


def test_empty_corpus_is_an_error() -> None:
    with pytest.raises(RetrievalError, match="at least one passage"):
        DenseRetriever.build([], encoder=FixedWidthEncoder(4))


def test_importing_lowers_the_blas_threshold() -> None:
    assert faiss.cvar.distance_compute_blas_threshold == 1


def test_importing_makes_idle_openmp_threads_sleep_unless_the_user_chose() -> None:
    script = "import os, rollout.retrieval; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    default = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    chosen = subprocess.run(
        [sys.executable, "-c", script], env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True,
        check=True,
    )
    assert (default.stdout.strip(), chosen.stdout.strip()) == ("PASSIVE", "ACTIVE")


def _recall_at_10(reference: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(reference.tolist(), found.tolist(), strict=True)]))


def test_flat_search_vectors_equals_numpy_brute_force(unit_vectors: MakeVectors) -> None:
    passages, queries = unit_vectors(500, 32, 1), unit_vectors(40, 32, 2)
    retriever = DenseRetriever.from_vectors(passages, encoder=None)
    assert retriever.index_type == "flat" and retriever.ef_search is None
    hits = retriever.search_vectors(queries, k=10)
    sims = queries @ passages.T
    expected = np.argsort(-sims, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(hits.indices, expected)
    np.testing.assert_allclose(hits.scores, np.take_along_axis(sims, expected, axis=1), atol=1e-5)


def test_hnsw_recall_against_flat_and_ef_search_applies(unit_vectors: MakeVectors) -> None:
    passages, queries = unit_vectors(3000, 64, 3), unit_vectors(200, 64, 4)
    exact = DenseRetriever.from_vectors(passages, encoder=None).search_vectors(queries, 10).indices
    hnsw = DenseRetriever.from_vectors(passages, encoder=None, params=HNSW)
    assert hnsw.index_type == "hnsw" and hnsw.ef_search == HNSW.ef_search == 128
    assert _recall_at_10(exact, hnsw.search_vectors(queries, 10).indices) >= 0.95
    # A narrow search misses neighbours on these high-dimensional random vectors.
    hnsw.ef_search = 10
    assert hnsw.ef_search == 10
    assert _recall_at_10(exact, hnsw.search_vectors(queries, 10).indices) < 0.9


def test_hnsw_save_load_keeps_the_graph_and_takes_ef_search_from_params(
    tmp_path: Path, unit_vectors: MakeVectors
) -> None:
    passages, queries = unit_vectors(400, 16, 5), unit_vectors(10, 16, 6)
    built = DenseRetriever.from_vectors(passages, encoder=None, params=DenseParams(index="hnsw", hnsw_m=8))
    built.save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert (meta["index"], meta["hnsw_m"], meta["ef_construction"]) == ("hnsw", 8, 200)
    loaded = DenseRetriever.load(tmp_path, encoder=None, params=DenseParams(ef_search=40))
    assert loaded.index_type == "hnsw" and loaded.ef_search == 40
    built.ef_search = 40
    np.testing.assert_array_equal(built.search_vectors(queries, 5).indices, loaded.search_vectors(queries, 5).indices)


def test_hnsw_index_answers_text_queries(encoder: TextEncoder, facts: list[Passage]) -> None:
    flat = DenseRetriever.build(facts, encoder=encoder)
    hnsw = DenseRetriever.build(facts, encoder=encoder, params=HNSW)
    queries = ["deepest lake", "who printed books"]
    np.testing.assert_array_equal(hnsw.search(queries, 3).indices, flat.search(queries, 3).indices)
    hits = hnsw.search(queries, 20)
    assert np.all(hits.indices[:, 12:] == -1) and np.all(np.isneginf(hits.scores[:, 12:]))


def test_search_vectors_checks_the_width(unit_vectors: MakeVectors) -> None:
    retriever = DenseRetriever.from_vectors(unit_vectors(5, 8, 0), encoder=None)
    with pytest.raises(RetrievalError, match=r"shape \(n_queries, 8\)"):
        retriever.search_vectors(unit_vectors(2, 4, 0), 3)


def test_text_search_without_an_encoder_says_what_to_do(unit_vectors: MakeVectors) -> None:
    retriever = DenseRetriever.from_vectors(unit_vectors(5, 8, 0), encoder=None)
    with pytest.raises(RetrievalError, match="search_vectors"):
        retriever.search(["anything"], 3)


def test_vectors_that_are_not_unit_length_are_refused() -> None:
    with pytest.raises(RetrievalError, match="normalize_L2"):
        DenseRetriever.from_vectors(np.ones((3, 4), dtype=np.float32), encoder=None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (DenseParams(index="annoy"), "use flat, hnsw or ivf"),  # type: ignore[arg-type]
        (DenseParams(index="hnsw", hnsw_m=0), "hnsw_m=0"),
    ],
)
def test_bad_params_name_the_setting(unit_vectors: MakeVectors, params: DenseParams, message: str) -> None:
    with pytest.raises(RetrievalError, match=message):
        DenseRetriever.from_vectors(unit_vectors(5, 8, 0), encoder=None, params=params)
