"""Encoder backends side by side: torch (sentence-transformers) against its ONNX exports (float32, int8).

    python bench/encoder_backends.py [--passages 2000] [--questions 200] [--rounds 3] [--batch 16]

On the demo knowledge base (its passages and questions), for each `retriever.dense.backend`:

- queries/s encoding the questions one at a time, and in batches of `--batch` (the gateway's
  `max_query_batch` default);
- recall@10 against torch: each backend encodes the corpus and the questions itself (as a run with
  that backend does), and its top 10 from an exact index is compared with torch's top 10 on the same
  questions; gold recall@10 is the same search scored against the questions' gold passages;
- import + load: a fresh interpreter that has imported `rollout.retrieval` (common to all backends)
  times `load_encoder` (importing torch + sentence-transformers, or onnxruntime) and the first query.
  Exports are made before any timing (once; cached in `--cache-dir`), so this is the load a gateway pays.

The speed passes run in rounds, each round every backend in turn, and the median round is reported,
so a neighbour's load on the machine falls on all backends alike. The load average is printed
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rollout.data import ensure_demo_kb, load_corpus, load_questions
from rollout.paths import PROJECT_ROOT, default_cache_dir
from rollout.retrieval import DenseRetriever, TextEncoder
from rollout.retrieval.encoder import load_encoder
from rollout.retrieval.params import ENCODER_BACKENDS, DenseParams

K = 10

_LOAD_CHILD = """
import json, sys, time
from pathlib import Path
import rollout.retrieval
from rollout.retrieval.encoder import load_encoder
from rollout.retrieval.params import DenseParams
started = time.perf_counter()
encoder = load_encoder(DenseParams(backend=sys.argv[1]), cache_dir=Path(sys.argv[2]))
loaded = time.perf_counter()
encoder.encode_queries(["Who founded the city of Arvel?"])
done = time.perf_counter()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "sentence_transformers", "onnxruntime"})
print(json.dumps({"load_s": loaded - started, "first_query_s": done - loaded, "imports": heavy}))
"""


def load_in_child(backend: str, cache_dir: Path) -> dict:
    path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _LOAD_CHILD, backend, str(cache_dir)], check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def queries_per_s(encode: Callable[[Sequence[str]], np.ndarray], questions: Sequence[str], batch: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(questions), batch):
        encode(questions[i:i + batch])
    return len(questions) / (time.perf_counter() - started)


def top_k(encoder: TextEncoder, passages_vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
    index = DenseRetriever.from_vectors(passages_vectors, encoder=None, params=DenseParams())
    return index.search_vectors(encoder.encode_queries(list(questions)), K).indices


def overlap(found: np.ndarray, reference: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, reference)]))


def gold_recall(found: np.ndarray, gold_rows: list[set[int]]) -> float:
    scored = [(len(set(row) & gold) / len(gold)) for row, gold in zip(found, gold_rows) if gold]
    return float(np.mean(scored))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--cache-dir", type=Path, default=None, help="default $ROLLOUT_CACHE_DIR or ~/.cache/rollout")
    args = p.parse_args(argv)
    cache_dir = args.cache_dir or default_cache_dir()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)

    kb = ensure_demo_kb(cache_dir, n_passages=args.passages, n_questions=args.questions)
    passages = load_corpus(kb.corpus_path)
    questions = load_questions(kb.questions_path)
    texts = [q.question for q in questions]
    row_of = {p.id: i for i, p in enumerate(passages)}
    gold_rows = [{row_of[g] for g in q.metadata.get("gold_doc_ids", []) if g in row_of} for q in questions]

    encoders = {b: load_encoder(DenseParams(backend=b), cache_dir=cache_dir) for b in ENCODER_BACKENDS}
    results: dict[str, dict] = {b: {} for b in ENCODER_BACKENDS}
    for backend, encoder in encoders.items():
        started = time.perf_counter()
        vectors = encoder.encode_passages([p.contents for p in passages])
        results[backend]["passages_per_s"] = len(passages) / (time.perf_counter() - started)
        results[backend]["top"] = top_k(encoder, vectors, texts)
        print(f"encoded {len(passages)} passages with {backend}", flush=True)
    for backend in ENCODER_BACKENDS:
        results[backend]["recall_vs_torch"] = overlap(results[backend]["top"], results["torch"]["top"])
        results[backend]["gold_recall"] = gold_recall(results[backend]["top"], gold_rows)

    rounds: dict[str, dict[str, list[float]]] = {b: {"single": [], "batched": []} for b in ENCODER_BACKENDS}
    for encoder in encoders.values():
        encoder.encode_queries(texts[:8])  # first-call set-up is the load's, not the queries'
    for _ in range(args.rounds):
        for backend, encoder in encoders.items():
            rounds[backend]["single"].append(queries_per_s(encoder.encode_queries, texts, 1))
            rounds[backend]["batched"].append(queries_per_s(encoder.encode_queries, texts, args.batch))
    loads: dict[str, list[dict]] = {b: [] for b in ENCODER_BACKENDS}
    for _ in range(args.rounds):
        for backend in ENCODER_BACKENDS:
            loads[backend].append(load_in_child(backend, cache_dir))

    print(f"\n{len(texts)} demo questions, {len(passages)} passages; median of {args.rounds} rounds; "
          f"ratios against torch in the same run\n")
    header = (f"| backend | queries/s, one at a time | queries/s, batches of {args.batch} | passages/s (build) "
              f"| recall@10 vs torch | gold recall@10 | import + load s | first query s | heavy imports |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    base = {k: statistics.median(v) for k, v in rounds["torch"].items()}
    base_load = statistics.median(r["load_s"] for r in loads["torch"])
    for backend in ENCODER_BACKENDS:
        single = statistics.median(rounds[backend]["single"])
        batched = statistics.median(rounds[backend]["batched"])
        load = statistics.median(r["load_s"] for r in loads[backend])
        first = statistics.median(r["first_query_s"] for r in loads[backend])
        r = results[backend]
        build = r["passages_per_s"]
        print(f"| {backend} | {single:.1f} ({single / base['single']:.2f}x) | {batched:.1f} "
              f"({batched / base['batched']:.2f}x) | {build:.0f} ({build / results['torch']['passages_per_s']:.2f}x) "
              f"| {r['recall_vs_torch']:.4f} | {r['gold_recall']:.4f} | {load:.2f} ({load / base_load:.2f}x) "
              f"| {first:.3f} | {', '.join(loads[backend][0]['imports'])} |")
    print(f"\nload average after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
