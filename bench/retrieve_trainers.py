"""Trainers' load on POST /retrieve/dense: concurrent 2,560-query requests that are never retried, against the same
searches made in-process, on the demo knowledge base.

    python bench/retrieve_trainers.py [--trainers 4] [--requests 3] [--per-request 2560] [--top-k 3] [--rounds 2]

Starts a gateway (`python -m rollout.gateway`, the demo knowledge base, rag_dense_only.json, its ledger in a
temporary folder) and loads the same knowledge base in this process. `--trainers` threads, each a trainer as
Search-R1's client is one, post `--requests` requests of `--per-request` demo questions one after another
(`{"queries", "topk", "return_scores": true}`, no retry: a refusal is a failed training step, counted and printed).
One trainer's requests are also searched in-process with `KnowledgeBase.search_many`, `--per-request` per call.
Both are measured `--rounds` times, taking turns, and the best of each is kept, so that the load of a shared
machine weighs on them alike. Prints the queries answered (and the ledger lines they left), the refusals (which
must be 0), the slowest request (its wait in the queue included), queries/s of each and the ratio of /retrieve
to in-process; and, since other processes on a shared machine take the cores in turns no round can control, the
queries per CPU-second of each (the gateway process's CPU time against this process's) and their ratio too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from rollout.data import ensure_demo_kb, load_questions
from rollout.gateway.launch import load_knowledge_base, parse_args
from rollout.gateway_file import GATEWAYS_DIR
from rollout.paths import default_cache_dir
from rollout.run.gateway_process import GatewayProcess
from rollout.run_folder import CALLS_FILE, STATS_DIR
from rollout.wire import HEADER_STEP, HEADER_TRAFFIC, TRAFFIC_TRAIN

CONFIG = GATEWAYS_DIR / "rag_dense_only.json"


@dataclass
class Tally:
    """What the trainers saw, added to under a lock."""

    answered: int = 0
    refused: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def trainer(url: str, requests: list[list[str]], top_k: int, tally: Tally) -> None:
    """Post each request once, in order, as Search-R1's client does: no retry, no timeout."""
    with httpx.Client(timeout=None) as client:
        for step, queries in enumerate(requests):
            t0 = time.perf_counter()
            r = client.post(url, json={"queries": queries, "topk": top_k, "return_scores": True},
                            headers={HEADER_STEP: str(step), HEADER_TRAFFIC: TRAFFIC_TRAIN})
            took = time.perf_counter() - t0
            with tally.lock:
                tally.slowest_s = max(tally.slowest_s, took)
                if r.status_code != 200:
                    tally.refused.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    continue
                result = r.json()["result"]
                if len(result) != len(queries) or not all(len(items) == top_k for items in result):
                    raise SystemExit(f"/retrieve answered {len(result)} of {len(queries)} queries")
                tally.answered += len(result)


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system, all threads) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def over_http(url: str, gateway_pid: int, plans: list[list[list[str]]], top_k: int,
              tally: Tally) -> tuple[float, float]:
    """Queries/s answered while every trainer posts its requests, all at once, and per CPU-second of the gateway."""
    answered = tally.answered
    threads = [threading.Thread(target=trainer, args=(url, plan, top_k, tally)) for plan in plans]
    t0, c0 = time.perf_counter(), cpu_s(gateway_pid)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    n = tally.answered - answered
    return n / (time.perf_counter() - t0), n / (cpu_s(gateway_pid) - c0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainers", type=int, default=4)
    p.add_argument("--requests", type=int, default=3, help="requests each trainer posts, one after another")
    p.add_argument("--per-request", type=int, default=2560, help="queries per request (512 prompts x 5 samples)")
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cache-dir", type=Path, default=None)
    args = p.parse_args()
    cache_dir = args.cache_dir or default_cache_dir()
    demo = ["--demo-passages", str(args.passages), "--cache-dir", str(cache_dir)]
    questions = [q.question for q in load_questions(ensure_demo_kb(cache_dir, n_passages=args.passages).questions_path)]
    stream = itertools.cycle(questions)
    plans = [[list(itertools.islice(stream, args.per_request)) for _ in range(args.requests)]
             for _ in range(args.trainers)]
    total = args.rounds * args.trainers * args.requests * args.per_request
    kb = load_knowledge_base(parse_args(["--config", str(CONFIG), *demo]), ["dense"])

    tally = Tally()
    http_qps, local_qps, http_per_cpu, local_per_cpu = 0.0, 0.0, 0.0, 0.0
    with tempfile.TemporaryDirectory() as out:
        with GatewayProcess(["--config", str(CONFIG), *demo, "--output-dir", out, "--no-report"]) as gw:
            url = gw.wait_ready().removesuffix("/mcp") + "/retrieve/dense"
            httpx.post(url, json={"queries": questions[:1], "topk": 1}, timeout=60).raise_for_status()  # warm
            assert gw.pid is not None
            for _ in range(args.rounds):
                qps, per_cpu = over_http(url, gw.pid, plans, args.top_k, tally)
                http_qps, http_per_cpu = max(http_qps, qps), max(http_per_cpu, per_cpu)
                t0, c0 = time.perf_counter(), time.process_time()
                for queries in plans[0]:
                    kb.search_many("dense", queries, args.top_k)
                n = args.requests * args.per_request
                local_qps = max(local_qps, n / (time.perf_counter() - t0))
                local_per_cpu = max(local_per_cpu, n / (time.process_time() - c0))
        lines = [json.loads(line) for line in (Path(out) / STATS_DIR / CALLS_FILE).read_text().splitlines()]
        recorded = sum(1 for x in lines if x.get("traffic") == TRAFFIC_TRAIN)

    print(f"dense index, {args.passages} passages, top_k {args.top_k}: {args.trainers} trainers x {args.requests} "
          f"requests x {args.per_request} queries, no retry; best of {args.rounds} rounds")
    print(f"answered: {tally.answered} of {total} queries ({recorded} ledger lines)")
    print(f"refused:  {len(tally.refused)} requests")
    for refusal in tally.refused:
        print(f"  {refusal}")
    print(f"slowest request: {tally.slowest_s:.1f} s (its wait in the queue included)")
    print(f"{'':<28} | {'queries/s':>9} | {'per CPU-second':>14}")
    print(f"{f'/retrieve/dense, {args.trainers} trainers':<28} | {http_qps:>9.0f} | {http_per_cpu:>14.0f}")
    print(f"{f'search_many, {args.per_request} per call':<28} | {local_qps:>9.0f} | {local_per_cpu:>14.0f}")
    wall, cpu = http_qps / local_qps, http_per_cpu / local_per_cpu
    print(f"{'ratio /retrieve / in-process':<28} | {wall:>9.2f} | {cpu:>14.2f}")
    return 1 if tally.refused or tally.answered != total or recorded != total else 0


if __name__ == "__main__":
    raise SystemExit(main())
