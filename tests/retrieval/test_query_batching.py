"""Concurrent dense searches batched into one encode and one faiss search give each caller its own results."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rollout.data import generate_demo_kb
from rollout.errors import RetrievalError
from rollout.identity_keys import is_identity_key
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, DenseParams, DenseRetriever, HybridRetriever, RetrievalParams
from rollout.retrieval.batching import BatchSettings
from rollout.retrieval.encoder import TextEncoder

# The encoder's output for a query moves in its last bits with the other rows of its batch
# (BLAS picks kernels by matrix shape; measured at most 9e-8 per vector component), so scores
# of a batched search agree with one-at-a-time ones to float32 rounding, not bit for bit.
SCORE_TOLERANCE = 1e-6
LONG_WAIT_MS = 10_000
"""A window no test reaches: batches then start only when full, so which calls share one is decided by count."""


class RecordingEncoder:
    """The real encoder, noting how many queries each encode call got."""

    def __init__(self, inner: TextEncoder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.passage_prefix = inner.passage_prefix
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.batches.append(len(texts))
        return self.inner.encode_queries(texts)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        return self.inner.encode_passages(texts, show_progress=show_progress)


@pytest.fixture(scope="module")
def demo() -> tuple[list[Passage], list[str]]:
    passages, questions = generate_demo_kb(n_passages=400, n_questions=48, seed=3)
    return passages, [q.question for q in questions]


@pytest.fixture(scope="module")
def vectors(demo, encoder) -> np.ndarray:
    return encoder.encode_passages([p.contents for p in demo[0]])


def retriever(vectors: np.ndarray, encoder, max_query_batch: int, wait_ms: float = LONG_WAIT_MS) -> DenseRetriever:
    params = DenseParams(max_query_batch=max_query_batch, batch_wait_ms=wait_ms)
    return DenseRetriever.from_vectors(vectors, encoder=encoder, params=params)


def concurrently(fn, items: list) -> list:
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def test_concurrent_dense_searches_match_one_at_a_time(demo, vectors, encoder) -> None:
    _, queries = demo
    plain = retriever(vectors, encoder, max_query_batch=1)
    assert plain.batching is None
    alone = [plain.search([q], 5) for q in queries]
    recording = RecordingEncoder(encoder)
    batched = retriever(vectors, recording, max_query_batch=8)
    try:
        together = concurrently(lambda q: batched.search([q], 5), queries)
    finally:
        batched.close()
    assert sorted(recording.batches) == [8] * 6  # 48 calls, batches start full
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(b.indices, a.indices)
        np.testing.assert_allclose(b.scores, a.scores, rtol=0, atol=SCORE_TOLERANCE)


def test_concurrent_hybrid_and_dense_share_batches_and_match_one_at_a_time(demo, vectors, encoder) -> None:
    passages, queries = demo
    sparse = BM25Retriever.build(passages)
    plain = HybridRetriever(retriever(vectors, encoder, max_query_batch=1), sparse)
    recording = RecordingEncoder(encoder)
    dense = retriever(vectors, recording, max_query_batch=8)
    batched = HybridRetriever(dense, sparse)
    # Hybrid asks the dense index 50 deep, dense calls 3 deep: one encode, one faiss search per depth.
    calls = [("hybrid" if i % 2 else "dense", q) for i, q in enumerate(queries[:32])]
    try:
        together = concurrently(
            lambda c: (batched if c[0] == "hybrid" else dense).search([c[1]], 5 if c[0] == "hybrid" else 3), calls
        )
    finally:
        dense.close()
    assert sorted(recording.batches) == [8] * 4
    for (kind, query), got in zip(calls, together, strict=True):
        want = (plain if kind == "hybrid" else plain.dense).search([query], 5 if kind == "hybrid" else 3)
        np.testing.assert_array_equal(got.indices, want.indices)
        if kind == "hybrid":  # fused scores come from ranks alone
            np.testing.assert_array_equal(got.scores, want.scores)
        else:
            np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=SCORE_TOLERANCE)


def test_a_batch_never_exceeds_its_max_size(demo, vectors, encoder) -> None:
    _, queries = demo
    recording = RecordingEncoder(encoder)
    # A short window: a last batch left below the size of the one before starts without the others.
    batched = retriever(vectors, recording, max_query_batch=4, wait_ms=100)
    # Mixed request sizes: a two-query search counts two toward the limit.
    requests = [[q] for q in queries[:12]] + [queries[12:14], queries[14:16]]
    try:
        results = concurrently(lambda qs: batched.search(qs, 2), requests)
    finally:
        batched.close()
    assert max(recording.batches) <= 4 and sum(recording.batches) == 16
    assert [r.indices.shape for r in results] == [(len(qs), 2) for qs in requests]


def test_a_search_larger_than_the_batch_limit_runs_alone(demo, vectors, encoder) -> None:
    _, queries = demo
    recording = RecordingEncoder(encoder)
    batched = retriever(vectors, recording, max_query_batch=4)
    try:
        hits = batched.search(queries[:10], 3)
    finally:
        batched.close()
    assert recording.batches == [10]
    np.testing.assert_array_equal(hits.indices, retriever(vectors, encoder, 1).search(queries[:10], 3).indices)


def test_a_failing_query_fails_only_its_caller(demo, vectors, encoder) -> None:
    _, queries = demo
    recording = RecordingEncoder(encoder)
    batched = retriever(vectors, recording, max_query_batch=4)
    requests = [[queries[0]], [None], [queries[1]], [queries[2]]]  # None cannot be encoded

    def search(qs):
        try:
            return batched.search(qs, 3)
        except TypeError as e:
            return e

    try:
        results = concurrently(search, requests)
    finally:
        batched.close()
    assert recording.batches[0] == 4  # all four shared a batch, which failed; then each ran alone
    assert isinstance(results[1], TypeError)
    plain = retriever(vectors, encoder, max_query_batch=1)
    for qs, got in zip(requests, results, strict=True):
        if qs != [None]:
            want = plain.search(qs, 3)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.scores, want.scores)  # run alone: the same computation


def test_an_idle_single_search_is_answered_exactly_as_unbatched(demo, vectors, encoder) -> None:
    _, queries = demo
    plain = retriever(vectors, encoder, max_query_batch=1)
    # Default window: nobody else comes; the first batch waits it out, later ones expect one query and go at once.
    batched = DenseRetriever.from_vectors(vectors, encoder=encoder, params=DenseParams())
    assert batched.batching == BatchSettings(max_queries=16, wait_s=0.002)
    try:
        for query in queries[:3]:
            got, want = batched.search([query], 5), plain.search([query], 5)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.scores, want.scores)
    finally:
        batched.close()


def test_batching_settings_are_checked() -> None:
    params = RetrievalParams.from_dict({"dense": {"max_query_batch": 1, "batch_wait_ms": 0}})
    assert (params.dense.max_query_batch, params.dense.batch_wait_ms) == (1, 0)
    # Speed only: a run is the same run whatever the batching.
    assert not any(is_identity_key(f"retriever.dense.{key}", uses_llm=True)
                   for key in ("max_query_batch", "batch_wait_ms"))
    with pytest.raises(RetrievalError, match="max_query_batch=0"):
        BatchSettings.from_params(0, 2)
    with pytest.raises(RetrievalError, match="batch_wait_ms"):
        BatchSettings.from_params(8, -1)
    with pytest.raises(RetrievalError, match="batch_wait_ms"):
        BatchSettings.from_params(8, "2")
