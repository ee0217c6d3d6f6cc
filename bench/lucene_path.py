"""rollout's Lucene path against Pyserini's own `LuceneSearcher`, in one process, over the same index and queries.

    python bench/lucene_path.py [--passages 1000] [--queries 2000] [--rounds 5] [--large 100000] [--smoke]

A FlashRAG corpus of `--passages` passages (bench/corpus_scale.py's: a 3-word title and 100 words drawn from a Zipf
law, generated once into the bench's cache) is indexed by Anserini (`build_lucene_index`, once, cached too). Queries
are 2 to 8 words drawn from the passages in turn. Each round then answers every query, k=10, in turn with:

- **Pyserini**: `LuceneSearcher.search(query, k)` one query a call, and `batch_search` over 16 queries a call (as
  many Java threads as rollout's batch uses), each hit's `docid` and `score` read (what any caller does next);
- **Pyserini bare**: the same calls, their hits left unread;
- **rollout**: `LuceneRetriever.search([query], k)` and `LuceneRetriever.search(queries, k)` over 16, its hits
  joined to the rows of the corpus store (`open_corpus`, `corpus_rows_of`) as a gateway joins them.

A round walks the queries in chunks of 160 and runs every variant on each chunk before the next, in an order that
turns from chunk to chunk, so that a load that shifts during the run touches all of them alike; each ratio is taken
within a round and its median over the rounds is printed, with the median q/s of each variant. `--large N` repeats
it all over an N-passage corpus (its index built once, a minute or so per 100,000 passages). `--smoke` runs 200
passages, 64 queries and 2 rounds: that the bench runs. Needs the `lucene` extra; prints the load average before
and after, since other work on the machine shares its cores.

The 1,000-passage corpus stands in for FlashRAG's 1,000-passage sample, which this repository does not ship.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from corpus_scale import corpus_file

from rollout.data import open_corpus
from rollout.records import Passage
from rollout.retrieval import _jvm
from rollout.retrieval.lucene import LuceneRetriever, build_lucene_index, corpus_rows_of

K = 10
BATCH = 16
CACHE = Path.home() / ".cache" / "rollout-bench"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=1000, help="passages of the corpus every ratio is measured on")
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5, help="rounds of every variant, interleaved")
    p.add_argument("--large", type=int, default=0, help="also measure over a generated corpus of this many passages")
    p.add_argument("--cache", type=Path, default=CACHE, help="where corpora and indexes are kept between runs")
    p.add_argument("--smoke", action="store_true", help="200 passages, 64 queries, 2 rounds: that the bench runs")
    return p


def passages_of(corpus: Path) -> list[Passage]:
    with corpus.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [Passage(id=r["id"], title="", text=r["contents"]) for r in rows]


CHUNK = 160
"""Queries each variant answers before the next variant runs (a multiple of BATCH)."""


def queries_of(passages: Sequence[Passage], n: int) -> list[str]:
    """n queries of 2 to 8 words, each drawn from one passage, the passages taken in turn (seeded)."""
    rng = random.Random(3)
    out = []
    for i in range(n):
        words = passages[i % len(passages)].text.split()
        out.append(" ".join(rng.sample(words, rng.randint(2, min(8, len(words))))))
    return out


def index_of(corpus: Path, cache: Path) -> Path:
    """Anserini's index of `corpus`, built once into the cache."""
    index = cache / f"lucene-path-{corpus.stem}"
    if (index / "done").is_file():
        return index
    (index / "input").mkdir(parents=True, exist_ok=True)
    link = index / "input" / corpus.name
    if not link.exists():
        link.symlink_to(corpus.resolve())
    build_lucene_index(index / "input", index / "index", threads=os.cpu_count() or 1)
    (index / "done").touch()
    return index


def pyserini_searcher(index: Path) -> Any:
    """Pyserini's own searcher. Its import needs the JVM running (rollout's retriever has opened an index) and imports
    Pyserini's OpenAI encoder, which wants a key at import."""
    with _jvm.environ({} if os.environ.get("OPENAI_API_KEY") else {"OPENAI_API_KEY": "unused-by-lucene-search"}):
        from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index))
    searcher.set_bm25(0.9, 0.4)
    return searcher


def variants(searcher: Any, retriever: LuceneRetriever) -> dict[str, Callable[[list[str]], object]]:
    """Each variant answers a list of queries (one call each for `one`, `BATCH` a call for `batch`)."""
    threads = min(os.cpu_count() or 1, BATCH)  # as rollout's batch path asks for

    def read(hits: Sequence[Any]) -> list[tuple[str, float]]:
        return [(h.docid, h.score) for h in hits]

    def py_one(qs: list[str]) -> object:
        return [read(searcher.search(q, K)) for q in qs]

    def py_batch(qs: list[str]) -> object:
        out = []
        for i in range(0, len(qs), BATCH):
            chunk = qs[i:i + BATCH]
            qids = [str(j) for j in range(len(chunk))]
            found = searcher.batch_search(chunk, qids, K, threads)
            out += [read(found[qid]) for qid in qids]
        return out

    def bare_one(qs: list[str]) -> object:
        return [searcher.search(q, K) for q in qs]

    def bare_batch(qs: list[str]) -> object:
        return [searcher.batch_search(qs[i:i + BATCH], [str(j) for j in range(len(qs[i:i + BATCH]))], K, threads)
                for i in range(0, len(qs), BATCH)]

    def ours_one(qs: list[str]) -> object:
        return [retriever.search([q], K) for q in qs]

    def ours_batch(qs: list[str]) -> object:
        return [retriever.search(qs[i:i + BATCH], K) for i in range(0, len(qs), BATCH)]

    return {"Pyserini one": py_one, "Pyserini batch": py_batch, "Pyserini bare one": bare_one,
            "Pyserini bare batch": bare_batch, "rollout one": ours_one, "rollout batch": ours_batch}


def measure(corpus: Path, cache: Path, n_queries: int, rounds: int) -> None:
    passages = passages_of(corpus)
    index = index_of(corpus, cache) / "index"
    store = open_corpus(corpus, cache / "stores")
    retriever = LuceneRetriever.open(index, corpus_rows_of(store), k1=0.9, b=0.4)
    searcher = pyserini_searcher(index)
    qs = queries_of(passages, n_queries)
    runs = variants(searcher, retriever)
    for run in runs.values():  # warm-up: the JIT, the index's pages, pyjnius' class cache
        run(qs[: min(len(qs), 200)])
    names = list(runs)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        seconds = dict.fromkeys(names, 0.0)
        for c, start in enumerate(range(0, len(qs), CHUNK)):
            chunk = qs[start:start + CHUNK]
            for name in names[c % len(names):] + names[: c % len(names)]:
                started = time.perf_counter()
                runs[name](chunk)
                seconds[name] += time.perf_counter() - started
        for name in names:
            rates[name].append(len(qs) / seconds[name])
    print(f"{len(passages):,} passages, {len(qs):,} queries, k={K}, {rounds} rounds interleaved "
          f"(median q/s; ratios: median over rounds of the ratio within a round)")
    for name in names:
        print(f"  {name:<20} {statistics.median(rates[name]):9.0f} q/s")
    for mode in ("one", "batch"):
        for base in ("Pyserini", "Pyserini bare"):
            ratio = statistics.median(o / p for o, p in zip(rates[f"rollout {mode}"], rates[f"{base} {mode}"]))
            what = "one query a call" if mode == "one" else f"batches of {BATCH}"
            print(f"  rollout / {base}, {what}: {ratio:.2f}x")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.passages, args.queries, args.rounds, args.large = 200, 64, 2, 0
    corpora = args.cache / "corpora"
    print(f"/proc/loadavg before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    measure(corpus_file(args.passages, corpora), args.cache, args.queries, args.rounds)
    if args.large:
        measure(corpus_file(args.large, corpora), args.cache, args.queries, args.rounds)
    print(f"/proc/loadavg after: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
