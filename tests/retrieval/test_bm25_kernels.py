"""BM25 kernels: our postings path and bm25s' own path rank like rank_bm25, and a loaded index never compiles."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from rollout.records import Passage
from rollout.retrieval import BM25Retriever, SparseParams, bm25_kernels, tokenize
from rollout.retrieval import numba_cache as kernel_cache
from rollout.retrieval.bm25_scorers import Bm25sScorer, RankBm25Scorer

PROJECT = Path(__file__).resolve().parents[2]


def _tied_corpus() -> tuple[list[Passage], list[str]]:
    """Passages of three or four distinct words from a small vocabulary: dozens share a length and a word, so
    scores tie far past the k-th place."""
    rng = np.random.default_rng(7)
    words = [f"{a}{b}" for a in ("amber", "basalt", "cobalt", "dune", "ember") for b in ("ite", "ola", "ur", "ex")]
    passages = [
        Passage(id=f"t-{i}", title="", text=" ".join(rng.choice(words, size=3 + int(i % 7 == 0), replace=False)))
        for i in range(600)
    ]
    queries = ["amberite", "basaltola cobaltur", "duneex duneex", "emberite amberur basaltex", "nothing here",
               "cobaltola amberite"]
    return passages, queries


def _scorers(passages: list[Passage]) -> tuple[Bm25sScorer, RankBm25Scorer]:
    corpus = [tokenize(p.contents) for p in passages]
    return Bm25sScorer.build(corpus, SparseParams()), RankBm25Scorer.build(corpus, SparseParams(backend="rank_bm25"))


@pytest.mark.parametrize("take", [1, 10, 40])
def test_both_paths_give_rank_bm25s_ids_and_scores_on_a_corpus_with_ties(take: int) -> None:
    passages, queries = _tied_corpus()
    fast, reference = _scorers(passages)
    tokens = [tokenize(q) for q in queries]
    ids = fast.term_ids(tokens)
    expected_rows, expected_scores = reference.top_k(tokens, take)
    # The corpus really ties: the group at the k-th score reaches past what bm25s is asked for,
    # so bm25s' path has to fall back for some queries.
    widest = max(int(np.sum(np.isclose(reference._bm25.get_scores(t), expected_scores[q, take - 1], rtol=0,
                                       atol=1e-12))) for q, t in enumerate(tokens) if expected_rows[q, take - 1] >= 0)
    assert widest > take + bm25_kernels._EXTRA
    for rows, scores in (fast.postings.postings_top_k(ids, take), fast.postings.bm25s_top_k(ids, take),
                         fast.top_k(tokens, take)):
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-9)
    assert np.all(expected_rows[queries.index("nothing here")] == -1)


def test_bm25s_path_re_ranks_ties_that_fit_in_its_answer() -> None:
    # Ten passages with one score, two with another: all fit in bm25s' answer (no fallback),
    # and the re-ranking alone must put the lower rows first.
    texts = ["amber basalt"] * 6 + ["amber cobalt dune"] * 2 + ["basalt"] * 4 + ["ember fjord"] * 8
    passages = [Passage(id=str(i), title="", text=t) for i, t in enumerate(texts)]
    fast, reference = _scorers(passages)
    tokens = [["amber"], ["basalt"], ["amber", "basalt"]]
    for take in (3, 7):
        rows, scores = fast.postings.bm25s_top_k(fast.term_ids(tokens), take)
        expected_rows, expected_scores = reference.top_k(tokens, take)
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-9)


_CHILD = """
import json, sys
from pathlib import Path
from rollout.retrieval import BM25Retriever
from rollout.retrieval.bm25_pruned import pruned_kernel

retriever = BM25Retriever.load(Path(sys.argv[1]))
kernel = pruned_kernel()  # the kernel queries take by default
after_load = [str(s) for s in kernel.signatures]
stats = kernel.stats
retriever.search(["amber basalt", "cobalt"], 5)
retriever.search(["dune"], 3)
print(json.dumps({
    "after_load": after_load,
    "after_search": [str(s) for s in kernel.signatures],
    "hits": sum(stats.cache_hits.values()),
    "misses": sum(stats.cache_misses.values()),
}))
"""


def _fresh_process_load(index: Path, numba_cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "NUMBA_CACHE_DIR": str(numba_cache)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(index)], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_loaded_index_answers_its_first_query_without_compiling(tmp_path: Path) -> None:
    passages, _ = _tied_corpus()
    BM25Retriever.build(passages).save(tmp_path / "index")
    cache = tmp_path / "numba-cache"
    # A cold process with an empty kernel cache compiles during load, not during the searches ...
    cold = _fresh_process_load(tmp_path / "index", cache)
    assert cold["after_load"] and cold["after_search"] == cold["after_load"]
    assert cold["misses"] >= 1 and any(cache.rglob("*.nbi"))
    # ... and the next process reads the compiled kernel from disk.
    warm = _fresh_process_load(tmp_path / "index", cache)
    assert warm["after_search"] == warm["after_load"] == cold["after_load"]
    assert warm["hits"] >= 1 and warm["misses"] == 0


def test_read_only_package_dirs_put_the_kernel_cache_under_the_project_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    monkeypatch.setenv("ROLLOUT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_cache.os, "access", lambda path, mode: False)
    kernel_cache.use_project_numba_cache()
    assert numba.config.CACHE_DIR == str(tmp_path / "numba") and (tmp_path / "numba").is_dir()


def test_an_explicit_numba_cache_dir_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("ROLLOUT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_cache.os, "access", lambda path, mode: False)
    kernel_cache.use_project_numba_cache()
    assert numba.config.CACHE_DIR == str(tmp_path / "mine")
