"""Concurrent dense and hybrid calls to a real gateway on loopback are batched and answer as calls made alone."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from mcp.client.client import Client

from rollout.data import generate_demo_kb
from rollout.gateway.knowledge import KnowledgeBase
from rollout.retrieval import BM25Retriever, DenseParams, DenseRetriever, HybridRetriever
from rollout.retrieval.encoder import TextEncoder
from tests.gateway.loopback import gateway_file, gateway_served
from tests.retrieval.test_query_batching import RecordingEncoder

BATCH = 8
SCORE_TOLERANCE = 1e-6
"""Batched encoding moves a query vector in its last bits (see tests/retrieval/test_query_batching.py)."""
MODULE = {"resource_type": "rag", "tool_groups": ["rag_query", "rag_query_hybrid"]}



def knowledge_base(passages, vectors, encoder, max_query_batch: int) -> KnowledgeBase:
    # A window no call reaches: batches start when full, so the test does not depend on timing.
    params = DenseParams(max_query_batch=max_query_batch, batch_wait_ms=10_000)
    dense = DenseRetriever.from_vectors(vectors, encoder=encoder, params=params)
    sparse = BM25Retriever.build(passages)
    return KnowledgeBase(passages, {"dense": dense, "sparse": sparse, "hybrid": HybridRetriever(dense, sparse)})


@pytest.fixture(scope="module")
def corpus(encoder: TextEncoder):
    passages, questions = generate_demo_kb(n_passages=300, n_questions=2 * BATCH, seed=5)
    return passages, [q.question for q in questions], encoder, encoder.encode_passages([p.contents for p in passages])


def test_concurrent_dense_and_hybrid_calls_are_batched_and_answer_as_one_at_a_time(corpus) -> None:
    passages, questions, encoder, vectors = corpus
    recording = RecordingEncoder(encoder)
    batched = knowledge_base(passages, vectors, recording, BATCH)
    calls = [("query_knowledge_base_hybrid" if i % 2 else "query_knowledge_base_dense", q)
             for i, q in enumerate(questions)]

    async def call_all(url: str) -> list[dict]:
        async with Client(f"{url}/mcp") as client:
            results = await asyncio.gather(*(client.call_tool(tool, {"query": q, "top_k": 4}) for tool, q in calls))
        assert not any(r.is_error for r in results)
        return [r.structured_content for r in results]

    try:
        with gateway_served(gateway_file(MODULE), batched) as url:
            got = asyncio.run(call_all(url))
    finally:
        batched.retrievers["dense"].close()
    assert sorted(recording.batches) == [BATCH, BATCH]

    plain = knowledge_base(passages, vectors, encoder, 1)
    for (tool, query), result in zip(calls, got, strict=True):
        kind = "hybrid" if tool.endswith("hybrid") else "dense"
        want = plain.search(kind, query, 4).model_dump()
        assert result["query"] == want["query"] and result["retriever"] == want["retriever"] == kind
        assert [{**h, "score": None} for h in result["results"]] == [{**h, "score": None} for h in want["results"]]
        np.testing.assert_allclose([h["score"] for h in result["results"]], [h["score"] for h in want["results"]],
                                   rtol=0, atol=0 if kind == "hybrid" else SCORE_TOLERANCE)
