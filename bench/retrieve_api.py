"""POST /retrieve against the same searches made in-process, on the demo knowledge base.

    python bench/retrieve_api.py [--retriever sparse|dense] [--passages 2000] [--queries 2048] [--top-k 5]

Starts a gateway (`python -m rollout.gateway`, the demo knowledge base, rag_sparse_only.json or
rag_dense_only.json, its ledger in a temporary folder) and loads the same knowledge base in this process.
For 1, 64 and 512 queries per request, it sends `--queries` demo questions through /retrieve, one request
after another on one keep-alive connection (`return_scores: true`), then makes the same searches in-process,
the same number of queries per call, with `KnowledgeBase.search_many` (the batch search, answering with the
result models the MCP tools return) and with `KnowledgeBase.search_rows` (the same ranking, rows and scores
only: what /retrieve calls), and prints queries/s of each and the ratios of /retrieve to them: the best of
`--rounds` rounds, all three taking turns, so that the load of a shared machine weighs on them alike.
Target at 512 per request: /retrieve >= 0.8 of the in-process (search_many) rate.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from rollout.data import ensure_demo_kb, load_questions
from rollout.gateway.launch import load_knowledge_base, parse_args
from rollout.gateway_file import GATEWAYS_DIR
from rollout.paths import default_cache_dir
from rollout.run.gateway_process import GatewayProcess

LEVELS = (1, 64, 512)
TARGET_RATIO = 0.8
GATEWAY_FILES = {"sparse": "rag_sparse_only.json", "dense": "rag_dense_only.json"}


def batches(questions: list[str], per_request: int, total: int) -> list[list[str]]:
    """`total` questions (cycling the list), in requests of `per_request`."""
    stream = list(itertools.islice(itertools.cycle(questions), total))
    return [stream[i:i + per_request] for i in range(0, total, per_request)]


def over_http(base: str, requests: list[list[str]], top_k: int) -> float:
    """Queries/s through /retrieve, requests sent one after another."""
    with httpx.Client(timeout=600) as client:
        client.post(f"{base}/retrieve", json={"queries": requests[0][:1], "topk": top_k})  # connection up
        t0 = time.perf_counter()
        for queries in requests:
            r = client.post(f"{base}/retrieve", json={"queries": queries, "topk": top_k, "return_scores": True})
            r.raise_for_status()
            if len(r.json()["result"]) != len(queries):
                raise SystemExit(f"/retrieve answered {len(r.json()['result'])} of {len(queries)} queries")
        return sum(map(len, requests)) / (time.perf_counter() - t0)


def in_process(search: Callable[[str, list[str], int], object], kind: str, requests: list[list[str]],
               top_k: int) -> float:
    """Queries/s of the same searches made with one of the knowledge base's batch searches."""
    t0 = time.perf_counter()
    for queries in requests:
        search(kind, queries, top_k)
    return sum(map(len, requests)) / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--retriever", choices=list(GATEWAY_FILES), default="sparse")
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--queries", type=int, default=2048, help="queries sent at each level")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=None)
    args = p.parse_args()
    cache_dir = args.cache_dir or default_cache_dir()
    config = GATEWAYS_DIR / GATEWAY_FILES[args.retriever]
    demo = ["--demo-passages", str(args.passages), "--cache-dir", str(cache_dir)]
    questions = [q.question for q in load_questions(ensure_demo_kb(cache_dir, n_passages=args.passages).questions_path)]
    kb = load_knowledge_base(parse_args(["--config", str(config), *demo]), [args.retriever])
    rows = []
    with tempfile.TemporaryDirectory() as out, \
            GatewayProcess(["--config", str(config), *demo, "--output-dir", out, "--no-report"]) as gw:
        base = gw.wait_ready().removesuffix("/mcp")
        for level in LEVELS:
            requests = batches(questions, level, args.queries)
            http, local, bare = 0.0, 0.0, 0.0
            for _ in range(args.rounds):
                http = max(http, over_http(base, requests, args.top_k))
                local = max(local, in_process(kb.search_many, args.retriever, requests, args.top_k))
                bare = max(bare, in_process(kb.search_rows, args.retriever, requests, args.top_k))
            rows.append((level, http, local, bare))
    print(f"{args.retriever} index, {args.passages} passages, top_k {args.top_k}, {args.queries} queries per level")
    print(f"{'per request':>11} | {'/retrieve q/s':>13} | {'search_many q/s':>15} | {'ratio':>5} | "
          f"{'search_rows q/s':>15} | {'ratio':>5}")
    for level, http, local, bare in rows:
        print(f"{level:>11} | {http:>13.0f} | {local:>15.0f} | {http / local:>5.2f} | {bare:>15.0f} | "
              f"{http / bare:>5.2f}")
    ratio = rows[-1][1] / rows[-1][2]
    print(f"target at {LEVELS[-1]} per request: ratio >= {TARGET_RATIO}: {'met' if ratio >= TARGET_RATIO else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
