import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from rollout.data.records import Passage
from rollout.retrieval import BM25Retriever, Hits, RetrievalError, Retriever, tokenize

MakePassages = Callable[[int, int], list[Passage]]
MakeQueries = Callable[[int, int], list[str]]


def _brute_force_scores(passages: list[Passage], query: str, **params: float) -> np.ndarray:
    bm25 = BM25Okapi([tokenize(p.contents) for p in passages], **params)
    return np.asarray(bm25.get_scores(tokenize(query)), dtype=np.float64)


def _descending(row: np.ndarray) -> bool:
    return bool(np.all(row[:-1] >= row[1:]))


def _assert_matches_brute_force(hits: Hits, passages: list[Passage], queries: list[str], k: int, **params) -> None:
    for row, query in enumerate(queries):
        expected = _brute_force_scores(passages, query, **params)
        # The k best scores, in order ...
        np.testing.assert_allclose(hits.scores[row], np.sort(expected)[::-1][:k].astype(np.float32), rtol=1e-6)
        # ... and each returned passage really has the score reported beside it (tie-agnostic).
        np.testing.assert_allclose(expected[hits.indices[row]], hits.scores[row], rtol=1e-6)
        assert len(set(hits.indices[row].tolist())) == k


@pytest.mark.parametrize(("k1", "b", "epsilon"), [(1.5, 0.75, 0.25), (0.9, 0.4, 0.0), (2.0, 1.0, 0.5)])
def test_top_k_equals_rank_bm25_brute_force(
    k1: float, b: float, epsilon: float, random_passages: MakePassages, random_queries: MakeQueries
) -> None:
    passages = random_passages(80, 1)
    queries = random_queries(25, 2)
    retriever = BM25Retriever([tokenize(p.contents) for p in passages], k1=k1, b=b, epsilon=epsilon)
    hits = retriever.search(queries, k=7)
    assert hits.indices.dtype == np.int64 and hits.scores.dtype == np.float32
    assert hits.indices.shape == hits.scores.shape == (25, 7)
    assert all(_descending(row) for row in hits.scores)
    _assert_matches_brute_force(hits, passages, queries, 7, k1=k1, b=b, epsilon=epsilon)


def test_build_uses_title_and_text(facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts, k1=1.2, b=0.6)
    queries = ["Glacier train", "Bolero", "spectrometer geologists"]
    _assert_matches_brute_force(retriever.search(queries, 3), facts, queries, 3, k1=1.2, b=0.6)


def test_distinctive_word_finds_its_passage(facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts)
    hits = retriever.search(["Which device has the code VX-1234?", "deepest freshwater lake"], k=3)
    assert facts[hits.indices[0, 0]].id == "fact-3"
    assert facts[hits.indices[1, 0]].title == "Lake Baikal"
    assert hits.scores[0, 0] > hits.scores[0, 1]


def test_is_a_retriever(facts: list[Passage]) -> None:
    retriever: Retriever = BM25Retriever.build(facts)
    assert retriever.name == "sparse"


def test_k_larger_than_corpus_pads_with_minus_one(facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts)
    hits = retriever.search(["Ravel"], k=len(facts) + 2)
    assert hits.indices.shape == (1, len(facts) + 2)
    assert sorted(hits.indices[0, : len(facts)].tolist()) == list(range(len(facts)))
    assert hits.indices[0, len(facts) :].tolist() == [-1, -1]
    assert np.all(np.isneginf(hits.scores[0, len(facts) :]))
    assert _descending(hits.scores[0])


def test_ties_go_to_the_lower_row(random_passages: MakePassages) -> None:
    same = Passage(id="x", title="Nebula", text="nebula")
    passages = random_passages(4, 0) + [same] * 3 + random_passages(4, 1) + [same] * 2
    hits = BM25Retriever.build(passages).search(["nebula"], k=4)
    assert hits.indices[0].tolist() == [4, 5, 6, 11]
    assert hits.scores[0, 0] > 0 and len(set(hits.scores[0].tolist())) == 1


def test_query_without_tokens_still_returns_k_rows(facts: list[Passage]) -> None:
    hits = BM25Retriever.build(facts).search(["the of and", ""], k=2)
    assert hits.indices.tolist() == [[0, 1], [0, 1]]
    assert np.all(hits.scores == 0)


def test_no_queries(random_passages: MakePassages) -> None:
    hits = BM25Retriever.build(random_passages(5, 0)).search([], k=3)
    assert hits.indices.shape == hits.scores.shape == (0, 3)


def test_save_load_round_trip(tmp_path: Path, random_passages: MakePassages, random_queries: MakeQueries) -> None:
    passages = random_passages(40, 3)
    queries = random_queries(10, 4)
    original = BM25Retriever.build(passages, k1=1.1, b=0.5)
    original.save(tmp_path / "bm25")
    assert not list((tmp_path / "bm25").glob("*.pkl"))
    loaded = BM25Retriever.load(tmp_path / "bm25")
    assert (loaded.k1, loaded.b, loaded.epsilon, loaded.num_passages) == (1.1, 0.5, 0.25, 40)
    before, after = original.search(queries, 5), loaded.search(queries, 5)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_array_equal(before.scores, after.scores)


def test_save_load_keeps_passages_without_tokens(tmp_path: Path) -> None:
    passages = [Passage("a", "The", "of the"), Passage("b", "Comet", "comet"), Passage("c", "River", "desert")]
    BM25Retriever.build(passages).save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    assert loaded.num_passages == 3
    assert loaded.search(["comet"], 1).indices.tolist() == [[1]]


def test_load_rejects_another_tokenizer_version(tmp_path: Path, random_passages: MakePassages) -> None:
    BM25Retriever.build(random_passages(3, 0)).save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "tokenizer_version": "0"}))
    with pytest.raises(RetrievalError, match="rebuild"):
        BM25Retriever.load(tmp_path)


def test_load_from_missing_directory_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match=r"BM25Retriever\.build"):
        BM25Retriever.load(tmp_path / "nothing")


@pytest.mark.parametrize(
    "corpus",
    [[], [Passage("a", "The", "of the and")]],
    ids=["empty", "only-stopwords"],
)
def test_unusable_corpus_is_an_error(corpus: list[Passage]) -> None:
    with pytest.raises(RetrievalError, match="passage"):
        BM25Retriever.build(corpus)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_is_an_error(facts: list[Passage], k: object) -> None:
    with pytest.raises(RetrievalError, match="k must be"):
        BM25Retriever.build(facts).search(["Ravel"], k)  # type: ignore[arg-type]


def test_a_bare_string_is_not_a_batch(facts: list[Passage]) -> None:
    with pytest.raises(RetrievalError, match="list"):
        BM25Retriever.build(facts).search("Ravel", 3)


def test_bad_parameters_name_the_usual_values(random_passages: MakePassages) -> None:
    with pytest.raises(RetrievalError, match="1.5 and 0.75"):
        BM25Retriever.build(random_passages(3, 0), b=1.5)
