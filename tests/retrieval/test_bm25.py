import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, Hits, Retriever, SparseParams, sparse, tokenize

MakePassages = Callable[[int, int], list[Passage]]
MakeQueries = Callable[[int, int], list[str]]

BACKENDS = ["bm25s", "rank_bm25"]


def _reference_scores(passages: list[Passage], query: str, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """rank_bm25's BM25Okapi with epsilon=0, built here independently of the retriever."""
    bm25 = BM25Okapi([tokenize(p.contents) for p in passages], k1=k1, b=b, epsilon=0)
    return np.asarray(bm25.get_scores(tokenize(query)), dtype=np.float64)


def _descending(row: np.ndarray) -> bool:
    return bool(np.all(row[:-1] >= row[1:]))


def _assert_matches_reference(hits: Hits, passages: list[Passage], queries: list[str], k: int, **params) -> None:
    for row, query in enumerate(queries):
        expected = _reference_scores(passages, query, **params)
        # Only passages scoring above 0 are returned; the rest of the row is padding ...
        found = min(k, int(np.count_nonzero(expected > 0)))
        assert hits.indices[row, found:].tolist() == [-1] * (k - found)
        assert np.all(np.isneginf(hits.scores[row, found:]))
        indices, scores = hits.indices[row, :found], hits.scores[row, :found]
        # ... the k best scores, in order ...
        np.testing.assert_allclose(scores, np.sort(expected)[::-1][:found], rtol=1e-6, atol=1e-6)
        # ... each returned passage really has the score reported beside it ...
        np.testing.assert_allclose(expected[indices], scores, rtol=1e-6, atol=1e-6)
        # ... and among equal scores the lower row comes first.
        order = np.lexsort((np.arange(len(expected)), -expected))[:found]
        assert indices.tolist() == order.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0)])
def test_top_k_equals_rank_bm25_with_epsilon_0(
    backend: str, k1: float, b: float, random_passages: MakePassages, random_queries: MakeQueries
) -> None:
    passages = random_passages(80, 1)
    queries = random_queries(25, 2)
    retriever = BM25Retriever.build(passages, SparseParams(backend=backend, k1=k1, b=b))
    hits = retriever.search(queries, k=7)
    assert hits.indices.dtype == np.int64 and hits.scores.dtype == np.float32
    assert hits.indices.shape == hits.scores.shape == (25, 7)
    assert all(_descending(row) for row in hits.scores)
    _assert_matches_reference(hits, passages, queries, 7, k1=k1, b=b)


def test_k1_and_b_move_both_backends_alike(random_passages: MakePassages, random_queries: MakeQueries) -> None:
    passages, queries = random_passages(60, 5), random_queries(10, 6)
    results = {
        (backend, k1, b): BM25Retriever.build(passages, SparseParams(backend=backend, k1=k1, b=b)).search(queries, 5)
        for backend in BACKENDS
        for k1, b in [(1.5, 0.75), (0.5, 0.75), (1.5, 0.2)]
    }
    for k1, b in [(0.5, 0.75), (1.5, 0.2)]:
        fast, ref = results["bm25s", k1, b], results["rank_bm25", k1, b]
        np.testing.assert_array_equal(fast.indices, ref.indices)
        np.testing.assert_allclose(fast.scores, ref.scores, rtol=1e-6)
        # The parameter really changed the scores.
        assert not np.allclose(fast.scores, results["bm25s", 1.5, 0.75].scores)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_batch_shared_among_threads_equals_the_reference(
    backend: str, random_passages: MakePassages, random_queries: MakeQueries, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four queries per thread and at least two threads, whatever this machine's core count.
    monkeypatch.setattr(sparse, "_QUERIES_PER_THREAD", 4)
    monkeypatch.setattr(sparse.os, "cpu_count", lambda: 3)
    passages, queries = random_passages(120, 21), random_queries(40, 22)
    retriever = BM25Retriever.build(passages, SparseParams(backend=backend))
    hits = retriever.search(queries, k=6)
    _assert_matches_reference(hits, passages, queries, 6)


def test_searches_from_many_threads_at_once_equal_sequential_ones(
    random_passages: MakePassages, random_queries: MakeQueries
) -> None:
    # The index reuses zeroed score arrays between searches; concurrent searches must not share one.
    passages = random_passages(4000, 23)
    queries = [" ".join(random_queries(6, seed)) for seed in range(64)]  # long queries: long kernel runs
    retriever = BM25Retriever.build(passages)
    expected = [retriever.search([q], 8) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(5):
            got = list(pool.map(lambda q: retriever.search([q], 8), queries))
            for one, reference in zip(got, expected, strict=True):
                np.testing.assert_array_equal(one.indices, reference.indices)
                np.testing.assert_array_equal(one.scores, reference.scores)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_repeated_query_word_counts_each_time(backend: str, random_passages: MakePassages) -> None:
    passages = random_passages(50, 25)
    queries = ["castle castle river", "castle river", "comet comet comet", "comet"]
    hits = BM25Retriever.build(passages, SparseParams(backend=backend)).search(queries, k=5)
    _assert_matches_reference(hits, passages, queries, 5)
    np.testing.assert_allclose(hits.scores[2], 3 * hits.scores[3], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_common_words_score_zero(backend: str) -> None:
    # "river" is in 3 of 4 passages: its idf is negative and floored at 0 (rank_bm25's default
    # epsilon=0.25 would give it a positive score instead).
    passages = [Passage(str(i), "River", text) for i, text in enumerate(["delta", "bank", "comet"])]
    passages.append(Passage("3", "Desert", "dune"))
    hits = BM25Retriever.build(passages, SparseParams(backend=backend)).search(["river", "river comet"], k=4)
    assert hits.indices.tolist() == [[-1, -1, -1, -1], [2, -1, -1, -1]]  # a zero score is no match
    assert hits.scores[1, 0] > 0 and np.all(np.isneginf(hits.scores[0])) and np.all(np.isneginf(hits.scores[1, 1:]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_build_uses_title_and_text(backend: str, facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts, SparseParams(backend=backend, k1=1.2, b=0.6))
    queries = ["Glacier train", "Bolero", "spectrometer geologists"]
    _assert_matches_reference(retriever.search(queries, 3), facts, queries, 3, k1=1.2, b=0.6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_distinctive_word_finds_its_passage(backend: str, facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts, SparseParams(backend=backend))
    hits = retriever.search(["Which device has the code VX-1234?", "deepest freshwater lake"], k=3)
    assert facts[hits.indices[0, 0]].id == "fact-3"
    assert facts[hits.indices[1, 0]].title == "Lake Baikal"
    assert hits.scores[0, 0] > hits.scores[0, 1]


def test_is_a_retriever_with_bm25s_by_default(facts: list[Passage]) -> None:
    retriever: Retriever = BM25Retriever.build(facts)
    assert retriever.name == "sparse"
    assert isinstance(retriever, BM25Retriever) and retriever.params == SparseParams(backend="bm25s")
    assert retriever.num_passages == len(facts)


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_larger_than_corpus_pads_with_minus_one(backend: str, facts: list[Passage]) -> None:
    retriever = BM25Retriever.build(facts, SparseParams(backend=backend))
    hits = retriever.search(["Ravel", "zzzz"], k=len(facts) + 2)
    assert hits.indices.shape == (2, len(facts) + 2)
    assert hits.indices[0].tolist() == [0, 1] + [-1] * len(facts)  # the two Ravel passages, nothing after
    assert hits.indices[1].tolist() == [-1] * (len(facts) + 2)
    assert np.all(hits.scores[0, :2] > 0) and np.all(np.isneginf(hits.scores[0, 2:]))
    assert all(_descending(row) for row in hits.scores)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_go_to_the_lower_row(backend: str, random_passages: MakePassages) -> None:
    same = Passage(id="x", title="Nebula", text="nebula")
    passages = random_passages(4, 0) + [same] * 3 + random_passages(4, 1) + [same] * 2
    hits = BM25Retriever.build(passages, SparseParams(backend=backend)).search(["nebula"], k=4)
    assert hits.indices[0].tolist() == [4, 5, 6, 11]
    assert hits.scores[0, 0] > 0 and len(set(hits.scores[0].tolist())) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_stopword_only_or_unknown_word_queries_return_no_passages(backend: str, facts: list[Passage]) -> None:
    hits = BM25Retriever.build(facts, SparseParams(backend=backend)).search(["the of and", "", "xylophone"], k=2)
    assert hits.indices.tolist() == [[-1, -1], [-1, -1], [-1, -1]]
    assert np.all(np.isneginf(hits.scores))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_query_matching_fewer_than_k_passages_returns_only_those(backend: str, facts: list[Passage]) -> None:
    hits = BM25Retriever.build(facts, SparseParams(backend=backend)).search(["the deepest lake"], k=5)
    assert [facts[i].title for i in hits.indices[0] if i >= 0] == ["Lake Baikal"]
    assert hits.indices[0, 1:].tolist() == [-1] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_queries(backend: str, random_passages: MakePassages) -> None:
    hits = BM25Retriever.build(random_passages(5, 0), SparseParams(backend=backend)).search([], k=3)
    assert hits.indices.shape == hits.scores.shape == (0, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stemming_matches_word_forms(backend: str) -> None:
    passages = [
        Passage("a", "Ravel", "Maurice Ravel was born in Ciboure."),
        Passage("b", "Etna", "Mount Etna erupts often."),
        Passage("c", "Gutenberg", "Gutenberg founded a printing workshop."),
    ]
    stemmed = BM25Retriever.build(passages, SparseParams(backend=backend, stemming=True))
    hits = stemmed.search(["borns", "founding", "eruption"], k=1)
    assert hits.indices[:, 0].tolist() == [0, 2, 1] and np.all(hits.scores > 0)
    plain = BM25Retriever.build(passages, SparseParams(backend=backend, stemming=False))
    assert np.all(plain.search(["borns", "founding"], k=3).indices == -1)  # no word form matches: no passage


def test_stemming_without_pystemmer_names_the_install_line(
    monkeypatch: pytest.MonkeyPatch, facts: list[Passage]
) -> None:
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # makes `import Stemmer` fail
    with pytest.raises(RetrievalError, match="pip install PyStemmer"):
        BM25Retriever.build(facts, SparseParams(stemming=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_load_round_trip(
    backend: str, tmp_path: Path, random_passages: MakePassages, random_queries: MakeQueries
) -> None:
    passages, queries = random_passages(40, 3), random_queries(10, 4)
    params = SparseParams(backend=backend, k1=1.1, b=0.5, stemming=True)
    original = BM25Retriever.build(passages, params)
    original.save(tmp_path / "bm25")
    assert not list((tmp_path / "bm25").glob("*.pkl"))
    loaded = BM25Retriever.load(tmp_path / "bm25")
    assert (loaded.params, loaded.num_passages) == (params, 40)
    assert BM25Retriever.load(tmp_path / "bm25", params).params == params
    before, after = original.search(queries, 5), loaded.search(queries, 5)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_array_equal(before.scores, after.scores)


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_takes_the_backend_from_meta(backend: str, tmp_path: Path, facts: list[Passage]) -> None:
    BM25Retriever.build(facts, SparseParams(backend=backend)).save(tmp_path)
    assert json.loads((tmp_path / "meta.json").read_text())["params"]["backend"] == backend
    assert BM25Retriever.load(tmp_path).params.backend == backend
    other = "rank_bm25" if backend == "bm25s" else "bm25s"
    with pytest.raises(RetrievalError, match="params=None"):
        BM25Retriever.load(tmp_path, SparseParams(backend=other))


def test_bm25s_index_is_memory_mapped(tmp_path: Path, facts: list[Passage], monkeypatch: pytest.MonkeyPatch) -> None:
    import bm25s

    BM25Retriever.build(facts, SparseParams(backend="bm25s")).save(tmp_path)
    calls: list[dict] = []
    real_load = bm25s.BM25.load.__func__

    def spy(cls, *args, **kwargs):
        calls.append(kwargs)
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(bm25s.BM25, "load", classmethod(spy))
    BM25Retriever.load(tmp_path)
    assert [c.get("mmap") for c in calls] == [True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_load_keeps_passages_without_tokens(backend: str, tmp_path: Path) -> None:
    passages = [Passage("a", "The", "of the"), Passage("b", "Comet", "comet"), Passage("c", "River", "desert")]
    BM25Retriever.build(passages, SparseParams(backend=backend)).save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    assert loaded.num_passages == 3
    assert loaded.search(["comet"], 1).indices.tolist() == [[1]]


@pytest.mark.parametrize(
    ("field", "value"), [("tokenizer_version", "1"), ("format_version", 1), ("format", "rollout-bm25-tokens")]
)
def test_load_rejects_other_versions(tmp_path: Path, random_passages: MakePassages, field: str, value: object) -> None:
    BM25Retriever.build(random_passages(3, 0)).save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, field: value}))
    with pytest.raises(RetrievalError, match="rebuild"):
        BM25Retriever.load(tmp_path)


@pytest.mark.parametrize("params", [None, {"backend": "bm25s", "k1": "fast"}, {"nonsense": 1}])
def test_load_with_broken_params_names_the_file(tmp_path: Path, random_passages: MakePassages, params: object) -> None:
    BM25Retriever.build(random_passages(3, 0)).save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "params": params}))
    with pytest.raises(RetrievalError, match=r"meta\.json has no valid params.*rebuild"):
        BM25Retriever.load(tmp_path)


def test_load_from_missing_directory_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match=r"BM25Retriever\.build"):
        BM25Retriever.load(tmp_path / "nothing")


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_with_missing_index_files_says_rebuild(backend: str, tmp_path: Path, facts: list[Passage]) -> None:
    BM25Retriever.build(facts, SparseParams(backend=backend)).save(tmp_path)
    for npy in tmp_path.glob("*.npy"):
        npy.unlink()
    with pytest.raises(RetrievalError, match="rebuild"):
        BM25Retriever.load(tmp_path)


def test_cache_params_name_everything_that_shapes_the_index() -> None:
    base = BM25Retriever.cache_params(SparseParams())
    assert base["backend"] == "bm25s" and base["k1"] == 1.5 and base["b"] == 0.75
    assert {"stopwords", "stemming", "tokenizer_version"} <= set(base)
    json.dumps(base)  # usable in a cache key
    for change in ({"backend": "rank_bm25"}, {"k1": 1.2}, {"b": 0.5}, {"stopwords": False}, {"stemming": True}):
        assert BM25Retriever.cache_params(SparseParams(**change)) != base
    as_ints = BM25Retriever.cache_params(SparseParams(k1=1, b=1))
    assert as_ints == BM25Retriever.cache_params(SparseParams(k1=1.0, b=1.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "corpus",
    [[], [Passage("a", "The", "of the and")]],
    ids=["empty", "only-stopwords"],
)
def test_unusable_corpus_is_an_error(backend: str, corpus: list[Passage]) -> None:
    with pytest.raises(RetrievalError, match="passage"):
        BM25Retriever.build(corpus, SparseParams(backend=backend))


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_is_an_error(facts: list[Passage], k: object) -> None:
    with pytest.raises(RetrievalError, match="k must be"):
        BM25Retriever.build(facts).search(["Ravel"], k)  # type: ignore[arg-type]


def test_a_bare_string_is_not_a_batch(facts: list[Passage]) -> None:
    with pytest.raises(RetrievalError, match="list"):
        BM25Retriever.build(facts).search("Ravel", 3)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (SparseParams(b=1.5), "1.5 and 0.75"),
        (SparseParams(k1=-1.0), "1.5 and 0.75"),
        (SparseParams(backend="lucene"), "rank_bm25"),  # type: ignore[arg-type]
    ],
)
def test_bad_parameters_name_the_valid_values(
    params: SparseParams, message: str, random_passages: MakePassages
) -> None:
    with pytest.raises(RetrievalError, match=message):
        BM25Retriever.build(random_passages(3, 0), params)
