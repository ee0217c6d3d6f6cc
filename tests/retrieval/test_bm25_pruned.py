"""The pruned BM25 kernel answers exactly as the exhaustive one: rows, scores, ties and padding."""

import json
from pathlib import Path

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, SparseParams
from rollout.retrieval.bm25_pruned import BLOCK, compute_bounds, load_bounds
from rollout.retrieval.bm25_scorers import Bm25sScorer


def _corpus(rng: np.random.Generator, passages: int, vocab: int, zipf: float, short: bool) -> list[list[str]]:
    """Passages of Zipf-drawn words: a few words in most passages (idf 0), many rare ones; short passages of few
    distinct words tie in score far past the k-th place."""
    lengths = rng.integers(1, 6 if short else 60, size=passages)
    return [[f"w{w}" for w in np.minimum(rng.zipf(zipf, size=n), vocab)] for n in lengths]


def _queries(rng: np.random.Generator, corpus: list[list[str]], vocab: int) -> list[list[str]]:
    """One-word, common-only, repeated-word, unknown-word and mixed queries."""
    common = [f"w{w}" for w in range(1, 4)]
    queries = [[f"w{w}"] for w in rng.integers(1, vocab, size=6)]
    queries += [common[:1], common, common[1:] * 2, ["nowhere"], []]
    for _ in range(14):
        passage = corpus[rng.integers(len(corpus))]
        queries.append([passage[i] for i in rng.integers(len(passage), size=rng.integers(1, 7))]
                       + [f"w{w}" for w in rng.integers(1, vocab, size=rng.integers(0, 3))])
    return queries


@pytest.mark.parametrize("seed", range(6))
def test_pruned_top_k_is_the_exhaustive_top_k_on_random_corpora(seed: int) -> None:
    rng = np.random.default_rng(seed)
    passages = int(rng.choice([40, 700, 3000]))
    vocab = int(rng.choice([30, 2000]))
    corpus = _corpus(rng, passages, vocab, zipf=float(rng.choice([1.1, 1.5])), short=bool(seed % 2))
    scorer = Bm25sScorer.build(corpus, SparseParams())
    postings = scorer.postings
    assert postings.path == "pruned"
    # Postings spanning several blocks, so block bounds and the search inside a block are exercised.
    assert passages < BLOCK or int(np.diff(postings.indptr).max()) > 2 * BLOCK
    queries = scorer.term_ids(_queries(rng, corpus, vocab))
    for take in sorted({1, 2, 10, 100, min(1000, passages), passages}):
        expected = postings.postings_top_k(queries, take)
        batched = postings.pruned_top_k(queries, take)
        alone = [postings.pruned_top_k([q], take) for q in queries]
        for got in (batched, (np.vstack([r for r, _ in alone]), np.vstack([s for _, s in alone]))):
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])  # bit for bit: summed in the same order
    assert np.all(postings.pruned_top_k(scorer.term_ids([["nowhere"], []]), 5)[0] == -1)


def test_bounds_bound_every_posting_and_name_each_blocks_last_passage() -> None:
    rng = np.random.default_rng(3)
    corpus = _corpus(rng, 2000, 50, 1.3, short=False)
    s = Bm25sScorer.build(corpus, SparseParams())._model.scores
    indptr, docs, data = s["indptr"], s["indices"], s["data"]
    b = compute_bounds(indptr, docs, data)
    for t in range(len(indptr) - 1):
        column = data[indptr[t]:indptr[t + 1]]
        assert b.term_max[t] == column.max()
        blocks = range(b.block_ptr[t], b.block_ptr[t + 1])
        assert len(blocks) == -(-len(column) // BLOCK)
        for i, block in enumerate(blocks):
            start = indptr[t] + i * BLOCK
            stop = min(start + BLOCK, indptr[t + 1])
            assert b.block_max[block] == data[start:stop].max()
            assert b.block_last[block] == docs[stop - 1]


def _passages(n: int) -> list[Passage]:
    rng = np.random.default_rng(11)
    words = [f"term{i}" for i in range(300)]
    return [Passage(id=str(i), title="", text=" ".join(rng.choice(words, size=12))) for i in range(n)]


def test_a_saved_index_keeps_its_bounds_and_recomputes_them_when_its_arrays_change(tmp_path: Path) -> None:
    index = tmp_path / "bm25"
    retriever = BM25Retriever.build_into(_passages(1500), index)
    assert sorted(p.name for p in index.glob("bounds.*")) == [
        "bounds.block_last.npy", "bounds.block_max.npy", "bounds.block_ptr.npy", "bounds.json", "bounds.term_max.npy"]
    queries = ["term1 term7 term42", "term3", "term250 term250 term9"]
    on = retriever.search(queries, 20)
    off = BM25Retriever.load(index, SparseParams(pruning="off"))
    assert off._scorer.postings.path == "postings"
    np.testing.assert_array_equal(off.search(queries, 20).indices, on.indices)
    np.testing.assert_array_equal(off.search(queries, 20).scores, on.scores)
    # Stale bounds (the score matrix rewritten since) are never used: they are computed again.
    stamps = json.loads((index / "bounds.json").read_text())
    np.save(index / "bounds.term_max.npy", np.zeros_like(np.load(index / "bounds.term_max.npy")))
    stamps["arrays"]["data.csc.index.npy"][1] += 1
    (index / "bounds.json").write_text(json.dumps(stamps))
    s = BM25Retriever.load(index)._scorer._model.scores
    fresh = load_bounds(index, s["indptr"], s["indices"], s["data"])
    assert fresh.term_max.max() > 0
    again = BM25Retriever.load(index, SparseParams())
    np.testing.assert_array_equal(again.search(queries, 20).indices, on.indices)


def test_pruning_takes_on_or_off_only() -> None:
    with pytest.raises(RetrievalError, match=r"retriever.sparse.pruning='fast': use on .* or off"):
        BM25Retriever.build(_passages(10), SparseParams(pruning="fast"))
