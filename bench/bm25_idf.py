"""BM25 with Robertson's idf beside Lucene's (`retriever.sparse.method`) on one corpus: build time, search speed and
how many passages a query matches.

    python bench/bm25_idf.py [--passages 50000] [--queries 500]

The corpus is generated: words drawn from a Zipf-like vocabulary, so a few words are in most passages, as "the"-like
words that are no stopword are in real text. Both indexes are built the bounded way (what a run's cache does) and
searched in turns, robertson then lucene, several rounds, so other load on the machine falls on both alike; the
ratios come from the same run. Lucene's idf gives every shared word a weight: more passages match, and a search
ranks more candidates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from rollout.records import Passage
from rollout.retrieval import BM25Retriever, SparseParams

METHODS = ("robertson", "lucene")
ROUNDS = 5
VOCABULARY = 20_000


def corpus(n: int, seed: int = 0) -> tuple[list[Passage], list[str]]:
    """`n` passages of 20-80 words and queries of 2-6 words, both drawn from a Zipf-like vocabulary."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(VOCABULARY)])
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.05
    weights /= weights.sum()
    lengths = rng.integers(20, 80, size=n)
    drawn = rng.choice(VOCABULARY, size=int(lengths.sum()), p=weights)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    passages = [Passage(f"p{i}", "", " ".join(words[drawn[starts[i]:starts[i + 1]]])) for i in range(n)]
    return passages, [" ".join(words[rng.choice(VOCABULARY, size=int(rng.integers(2, 7)), p=weights)])
                      for _ in range(1000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    passages, queries = corpus(args.passages)
    queries = queries[: args.queries]
    build_s: dict[str, list[float]] = {m: [] for m in METHODS}
    search_s: dict[str, list[float]] = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory() as tmp:
        retrievers = {}
        for m in METHODS:  # one build each first (the numba kernels compile once), then the timed rounds
            retrievers[m] = BM25Retriever.build_into(passages, Path(tmp) / f"{m}-0", SparseParams(method=m), workers=1)
        for r in range(1, ROUNDS + 1):
            for m in METHODS:
                started = time.perf_counter()
                retrievers[m] = BM25Retriever.build_into(passages, Path(tmp) / f"{m}-{r}", SparseParams(method=m),
                                                         workers=1)
                build_s[m].append(time.perf_counter() - started)
                started = time.perf_counter()
                retrievers[m].search(queries, 10)
                search_s[m].append(time.perf_counter() - started)
        matched = {m: float(np.mean((retrievers[m].search(queries, 1000).indices >= 0).sum(axis=1))) for m in METHODS}
    print(f"{args.passages} passages, {len(queries)} queries, {ROUNDS} rounds, load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"{'method':<10} {'build s':>8} {'search q/s':>11} {'matched (of 1000 asked)':>24}")
    for m in METHODS:
        print(f"{m:<10} {statistics.median(build_s[m]):8.2f} {len(queries) / statistics.median(search_s[m]):11.0f} "
              f"{matched[m]:24.1f}")
    build, search = ({m: statistics.median(t[m]) for m in METHODS} for t in (build_s, search_s))
    print(f"lucene / robertson: build time x{build['lucene'] / build['robertson']:.2f}, "
          f"search speed x{search['robertson'] / search['lucene']:.2f}, "
          f"passages matched x{matched['lucene'] / matched['robertson']:.2f}")


if __name__ == "__main__":
    main()
