"""BM25 at the field's scale: the built-in BM25, pruned and exhaustive, beside Pyserini's Lucene, side by side.

    python bench/bm25_at_scale.py [--sizes 1000000,5000000] [--queries 1000] [--rounds 3] [--smoke]

For each size, the synthetic corpus of bench/corpus_scale.py (N passages of 103 Zipf-drawn words) with its corpus
store and BM25 index built once into `--work`/cache-N, and Pyserini's Lucene index of the same corpus built once
into `--work`/lucene-N (Anserini's IndexCollection, as `rollout.retrieval.lucene.build_lucene_index` runs it).
Then, with `--queries` three-word queries drawn from the corpus' passages (corpus_scale.queries):

- **in process**, the three in one process taking turns, each round every engine: `BM25Retriever.search` with
  `retriever.sparse.pruning=on` and `off`, and `LuceneRetriever.search` (k1=0.9, b=0.4, Pyserini's own
  defaults): q/s one query a call and 16 a call, k=10;
- **through the same route**: three `rollout gateway`s over the corpus (`conf/gateways/rag_sparse_only.json`),
  one per engine (Lucene's by `retriever.sparse.index_path`), and the queries via `POST /retrieve/sparse`, one and
  16 a request, the gateways taking turns round by round.

Each figure is the median over `--rounds` rounds; the engines alternate within a round, so a busy machine slows
all alike. It prints the q/s, pruned / Lucene and pruned / exhaustive, the fall of pruned q/s from size to size,
and whether the pruned answers equal the exhaustive ones (ids and scores, every bench query at k 10 and 1,000).
The built-in BM25 scores with its own settings (k1=1.5, b=0.75, stopwords dropped) and Lucene with its own: the
same queries, each engine's own ranking. `--smoke` runs 3,000 passages and 40 queries (the suite runs it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_scale import ROOT, Gateway, corpus_file, queries, start_gateway  # noqa: E402

ENGINES = ("pruned", "exhaustive", "lucene")
BATCHES = (1, 16)

PREPARE = """
import sys
from pathlib import Path
from rollout.data import open_corpus
from rollout.retrieval import load_or_build_indexes
corpus, cache = Path(sys.argv[1]), Path(sys.argv[2])
load_or_build_indexes(open_corpus(corpus, cache), cache, which=["sparse"])
"""
LUCENE_BUILD = """
import sys
from rollout.retrieval.lucene import build_lucene_index
build_lucene_index(sys.argv[1], sys.argv[2], threads=2)
"""
IN_PROCESS = """
import json, sys, time
from pathlib import Path
import numpy as np
from rollout.retrieval import BM25Retriever, SparseParams
from rollout.retrieval.lucene import LuceneRetriever
cache, lucene, queries_file, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
qs = json.loads(Path(queries_file).read_text())
index = next(Path(cache).glob("sparse-*"))
engines = {"pruned": BM25Retriever.load(index, SparseParams(pruning="on")),
           "exhaustive": BM25Retriever.load(index, SparseParams(pruning="off")),
           "lucene": LuceneRetriever.open(lucene, lambda ids: np.zeros(len(ids), np.int64), k1=0.9, b=0.4)}
out = {}
for retriever in engines.values():
    retriever.search(qs[:16], 10)
for _ in range(rounds):
    for batch in (1, 16):
        for engine, retriever in engines.items():
            started = time.perf_counter()
            for i in range(0, len(qs), batch):
                retriever.search(qs[i:i + batch], 10)
            out.setdefault(f"process {engine} qps_{batch}", []).append(len(qs) / (time.perf_counter() - started))
hits = {engine: [engines[engine].search(qs, k) for k in (10, 1000)] for engine in ("pruned", "exhaustive")}
out["identical"] = all(np.array_equal(a.indices, b.indices) and np.array_equal(a.scores, b.scores)
                       for a, b in zip(hits["pruned"], hits["exhaustive"]))
print(json.dumps(out))
"""


def prepared(n: int, work: Path, corpora: Path) -> tuple[Path, Path, Path]:
    """The corpus, its cache (store and BM25 index) and its Lucene index, each built once."""
    corpus = corpus_file(n, corpora)
    cache, lucene = work / f"cache-{n}", work / f"lucene-{n}"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", PREPARE, str(corpus), str(cache)], cwd=ROOT, check=True)
    if not (lucene / "done").is_file():
        subprocess.run(["rm", "-rf", str(lucene)], check=True)
        (work / f"lucene-input-{n}").mkdir(parents=True, exist_ok=True)
        link = work / f"lucene-input-{n}" / corpus.name
        if not link.exists():
            link.symlink_to(corpus)
        subprocess.run([sys.executable, "-c", LUCENE_BUILD, str(link.parent), str(lucene)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        (lucene / "done").write_text("")
    print(f"{n:,} passages: indexes ready in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return corpus, cache, lucene


def in_process(cache: Path, lucene: Path, queries_file: Path, rounds: int) -> dict:
    """Every engine in one process, taking turns round by round; q/s lists and whether pruned == exhaustive."""
    done = subprocess.run([sys.executable, "-c", IN_PROCESS, str(cache), str(lucene), str(queries_file), str(rounds)],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def gateways(corpus: Path, cache: Path, lucene: Path, folder: Path) -> dict[str, Gateway]:
    configs = {"pruned": {"sparse": {"pruning": "on"}}, "exhaustive": {"sparse": {"pruning": "off"}},
               "lucene": {"sparse": {"index_path": str(lucene), "k1": 0.9, "b": 0.4}}}
    started = {}
    for engine, config in configs.items():
        path = folder / f"{engine}.json"
        path.write_text(json.dumps(config))
        started[engine] = start_gateway(ROOT, corpus, cache, "conf/gateways/rag_sparse_only.json",
                                        "--retriever-config", str(path), "--max-top-k", "1000")
    return started


def over_http(gw: Gateway, qs: list[str], batch: int) -> float:
    with httpx.Client(timeout=600) as client:
        started = time.perf_counter()
        for i in range(0, len(qs), batch):
            client.post(f"{gw.url}/retrieve/sparse", json={"queries": qs[i:i + batch], "topk": 10}).raise_for_status()
        return len(qs) / (time.perf_counter() - started)


def measure(n: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    corpus, cache, lucene = prepared(n, args.work, args.corpora)
    qs = queries(corpus, args.queries)
    folder = Path(tempfile.mkdtemp(prefix="bm25-scale-"))
    (folder / "queries.json").write_text(json.dumps(qs))
    runs: dict[str, list[float]] = in_process(cache, lucene, folder / "queries.json", args.rounds)
    identical = runs.pop("identical")
    served = gateways(corpus, cache, lucene, folder)
    try:
        for engine in ENGINES:  # first requests of each: warm the route and the pages its queries touch
            over_http(served[engine], qs[:32], 16)
        for _ in range(args.rounds):
            for batch in BATCHES:
                for engine in ENGINES:
                    runs.setdefault(f"gateway {engine} qps_{batch}", []).append(over_http(served[engine], qs, batch))
    finally:
        for gw in served.values():
            gw.close()
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    result = {key: statistics.median(values) for key, values in runs.items()}
    result["identical"] = float(identical)
    return {"n": n, **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1_000_000, 5_000_000])
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "rollout-bench")
    p.add_argument("--corpora", type=Path, default=Path.home() / ".cache" / "rollout-bench" / "corpora")
    p.add_argument("--smoke", action="store_true", help="3,000 passages, 40 queries, one round: that the bench runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.queries, args.rounds = [3000], 40, 1
    rows = [measure(n, args) for n in args.sizes]
    print("where | passages | engine | q/s, 1 a request | q/s, 16 a request")
    for row in rows:
        for where in ("process", "gateway"):
            for engine in ENGINES:
                print(f"{where} | {row['n']:,} | {engine} | "
                      + " | ".join(f"{row[f'{where} {engine} qps_{b}']:,.0f}" for b in BATCHES))
    for row in rows:
        for where in ("process", "gateway"):
            print(f"{row['n']:,} passages, {where}: " + ", ".join(
                f"pruned / {other} {row[f'{where} pruned qps_{b}'] / row[f'{where} {other} qps_{b}']:.2f}x "
                f"({b} a request)" for other in ("lucene", "exhaustive") for b in BATCHES))
        print(f"{row['n']:,} passages: pruned answers equal the exhaustive ones (ids and scores, k 10 and 1,000): "
              f"{'yes' if row['identical'] else 'NO'}")
    for a, b in zip(rows, rows[1:]):
        print(f"pruned q/s from {a['n']:,} to {b['n']:,} passages (gateway): " + ", ".join(
            f"falls {a[f'gateway pruned qps_{k}'] / b[f'gateway pruned qps_{k}']:.2f}x ({k} a request)"
            for k in BATCHES) + "; Lucene: " + ", ".join(
            f"{a[f'gateway lucene qps_{k}'] / b[f'gateway lucene qps_{k}']:.2f}x" for k in BATCHES))
    return 0 if all(row["identical"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
