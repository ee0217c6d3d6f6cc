"""A gateway over a Lucene index under a long run of `POST /retrieve/sparse`: its Java threads and memory, start to end.

    python bench/lucene_soak.py [--requests 20000] [--passages 2000] [--clients 4]

A training run sends hundreds of thousands of such requests, each answered on a thread of its own; a Java thread
per request that is never released shows here as JVM live threads growing with the requests, and memory with them.
The gateway (`build_gateway`, the `rag_query_sparse` group over `LuceneRetriever`, as `retriever.sparse.index_path`
serves it) runs in this process, so its JVM's thread count can be read (java.lang.management's thread bean, through
pyjnius); the load comes from a child process of `--clients` threads, each posting one query per request (questions
of the demo knowledge base, in turn). Printed, at start (after a warm-up of 200 requests), half-way and at the end:
JVM live threads, the OS threads and resident memory of the gateway process (the JVM is in it; the load client is
left out); and the requests per second. Needs the `lucene` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WARM_UP = 200


def client(url: str, queries: list[str], n: int, threads: int) -> None:
    """Post `n` one-query requests to `url` from `threads` threads; exit non-zero on any answer but 200."""
    import httpx

    failures: list[str] = []

    def run(first: int) -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(first, n, threads):
                r = http.post(url, json={"queries": [queries[i % len(queries)]], "topk": 5})
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failures:
        sys.exit(f"{len(failures)} of {n} requests failed, e.g. {failures[0]}")


def jvm_threads() -> int:
    management = importlib.import_module("jnius").autoclass("java.lang.management.ManagementFactory")
    return int(management.getThreadMXBean().getThreadCount())


def process_status() -> tuple[int, float]:
    """OS threads and resident MiB of this process."""
    fields = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return int(fields["Threads"][0]), int(fields["VmRSS"][0]) / 1024


def load(url: str, queries_file: Path, n: int, threads: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--client", url, str(queries_file), str(n), str(threads)], check=True)
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.client:
        url, queries_file, n, threads = args.client
        client(url, json.loads(Path(queries_file).read_text(encoding="utf-8")), int(n), int(threads))
        return

    import uvicorn

    from rollout.data.demo_kb import generate_demo_kb
    from rollout.gateway.knowledge import KnowledgeBase
    from rollout.gateway.server import build_gateway, make_uvicorn
    from rollout.gateway_file import GatewayFile
    from rollout.listen import bind_socket
    from rollout.retrieval.lucene import LuceneRetriever, build_lucene_index, corpus_rows_of

    passages, questions = generate_demo_kb(n_passages=args.passages, n_questions=200)
    folder = Path(tempfile.mkdtemp(prefix="lucene-soak-"))
    (folder / "input").mkdir()
    with (folder / "input" / "corpus.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages)
    (folder / "queries.json").write_text(json.dumps([q.question for q in questions]), encoding="utf-8")
    build_lucene_index(folder / "input", folder / "index")
    retriever = LuceneRetriever.open(folder / "index", corpus_rows_of(passages), k1=0.9, b=0.4)

    gateway = GatewayFile.model_validate({"server_name": "lucene-soak", "modules": [
        {"resource_type": "rag", "tool_groups": ["rag_query_sparse"]}]})
    server = build_gateway(gateway, KnowledgeBase(passages, {"sparse": retriever}), None)
    uv: uvicorn.Server = make_uvicorn(server)
    sock = bind_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/retrieve/sparse"
    threading.Thread(target=lambda: asyncio.run(uv.serve(sockets=[sock])), daemon=True).start()
    while not uv.started:
        time.sleep(0.05)

    load(url, folder / "queries.json", WARM_UP, args.clients)
    marks = [(jvm_threads(), *process_status())]
    seconds = 0.0
    for half in (args.requests // 2, args.requests - args.requests // 2):
        seconds += load(url, folder / "queries.json", half, args.clients)
        marks.append((jvm_threads(), *process_status()))
    uv.should_exit = True

    print(f"gateway over a Lucene index of {len(passages)} passages ({os.cpu_count()} cores), "
          f"{args.requests} POST /retrieve/sparse requests of one query from {args.clients} client threads "
          f"after {WARM_UP} to warm up: {args.requests / seconds:.0f} requests/s")
    print(f"{'':<28}{'start':>10}{'half-way':>10}{'end':>10}")
    for name, column, form in (("JVM live threads", 0, "d"), ("gateway process OS threads", 1, "d"),
                               ("gateway process RSS (MiB)", 2, ".0f")):
        print(f"{name:<28}" + "".join(f"{mark[column]:>10{form}}" for mark in marks))

if __name__ == "__main__":
    main()
