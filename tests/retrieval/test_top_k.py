import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.retrieval.base import top_k_hits


@pytest.mark.parametrize("k", [1, 7, 24, 50, 60])
def test_matches_a_full_stable_sort_with_many_ties(k: int) -> None:
    rng = np.random.default_rng(k)
    # Four distinct values over 50 columns: every k falls inside a run of ties.
    scores = rng.integers(0, 4, size=(30, 50)).astype(np.float64)
    hits = top_k_hits(scores, k)
    take = min(k, 50)
    for row in range(30):
        expected = np.lexsort((np.arange(50), -scores[row]))[:take]
        assert hits.indices[row, :take].tolist() == expected.tolist()
        assert hits.scores[row, :take].tolist() == scores[row, expected].tolist()
    assert np.all(hits.indices[:, take:] == -1)
    assert np.all(np.isneginf(hits.scores[:, take:]))


def test_dtypes_and_shapes() -> None:
    hits = top_k_hits(np.array([[0.5, 2.0, 1.0]], dtype=np.float64), 2)
    assert hits.indices.dtype == np.int64 and hits.scores.dtype == np.float32
    assert hits.indices.tolist() == [[1, 2]] and hits.scores.tolist() == [[2.0, 1.0]]


def test_rejects_a_vector() -> None:
    with pytest.raises(RetrievalError, match="n_queries, n_docs"):
        top_k_hits(np.zeros(3), 1)
