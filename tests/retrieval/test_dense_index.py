import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.data.records import Passage
from rollout.retrieval import BM25Retriever, DenseRetriever, Encoder, RetrievalError, Retriever

MakePassages = Callable[[int, int], list[Passage]]
MakeQueries = Callable[[int, int], list[str]]


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
def random_index(encoder: Encoder) -> tuple[list[Passage], DenseRetriever]:
    rng = np.random.default_rng(7)
    words = "castle violin comet harbor glacier orchard quartz temple willow lantern copper meadow".split()
    passages = []
    for i in range(60):
        text = " ".join(rng.choice(words, size=int(rng.integers(3, 12))))
        passages.append(Passage(id=str(i), title=str(rng.choice(words)), text=text))
    return passages, DenseRetriever.build(passages, encoder=encoder)


def test_encoder_returns_unit_float32_rows(encoder: Encoder) -> None:
    vectors = encoder.encode_passages(["a first text", "another, longer text about rivers"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, encoder.dimension) == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    empty = encoder.encode_queries([])
    assert empty.dtype == np.float32 and empty.shape == (0, 384)


def test_prefixes_are_prepended(encoder: Encoder) -> None:
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


def test_search_equals_numpy_brute_force(encoder: Encoder, random_index, random_queries: MakeQueries) -> None:
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


def test_paraphrase_ranks_the_right_passage_first(encoder: Encoder, facts: list[Passage]) -> None:
    retriever: Retriever = DenseRetriever.build(facts, encoder=encoder)
    assert retriever.name == "dense"
    hits = retriever.search(["What is the birthplace of the composer Ravel?", "who discovered antibiotics"], k=3)
    # "birthplace" vs "was born in", and ahead of the other Ravel passage.
    assert facts[hits.indices[0, 0]].title == "Maurice Ravel"
    assert facts[hits.indices[0, 1]].title == "Bolero"
    assert facts[hits.indices[1, 0]].title == "Penicillin"
    # The second query shares no word with its passage, which BM25 cannot score at all.
    sparse = BM25Retriever.build(facts).search(["who discovered antibiotics"], k=len(facts))
    sparse_scores = dict(zip(sparse.indices[0].tolist(), sparse.scores[0].tolist(), strict=True))
    assert sparse_scores[int(hits.indices[1, 0])] == 0


def test_k_larger_than_corpus_pads_with_minus_one(encoder: Encoder, facts: list[Passage]) -> None:
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


def test_save_load_round_trip(tmp_path: Path, encoder: Encoder, random_index, random_queries: MakeQueries) -> None:
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


def test_load_from_missing_directory_says_how_to_build(tmp_path: Path, encoder: Encoder) -> None:
    with pytest.raises(RetrievalError, match=r"DenseRetriever\.build"):
        DenseRetriever.load(tmp_path, encoder=encoder)


def test_empty_corpus_is_an_error() -> None:
    with pytest.raises(RetrievalError, match="at least one passage"):
        DenseRetriever.build([], encoder=FixedWidthEncoder(4))


def test_importing_lowers_the_blas_threshold() -> None:
    assert faiss.cvar.distance_compute_blas_threshold == 1
