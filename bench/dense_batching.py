"""Dense tool under concurrent callers, with query batching on and off, through real gateways on the demo corpus.

    python bench/dense_batching.py [--passages 2000] [--rounds 2] [--wait-ms 2] [--max-batch 16]

Starts two gateways (`python -m rollout.gateway`, rag_dense_only.json, the demo knowledge base):
`unbatched` with retriever.dense.max_query_batch=1 (each call encodes its own query on its own
thread, as before batching) and `batched` with the given max batch and wait. Callers post to the
flat-parameter route (POST /proxy/tools/query_knowledge_base_dense/call), each sending its calls one
after another; the gateways take turns, in alternating order per round, so drift hits both alike.

Figures per gateway, pooled over the rounds: round-trip p50/p95 with 1 caller (idle), p50 and calls/s
with 8 callers, calls/s with 64 callers. Targets: batched p50@8 / p50@1 <= 1.5, and batched calls/s@64
/ unbatched calls/s@64 >= 3. Last, the encoder's own ceiling in this process (queries/s by batch size,
encode plus flat search, no gateway): no gateway can pass it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOOL = "query_knowledge_base_dense"
TOP_K = 5
LEVELS = (1, 8, 64)
TARGET_LATENCY_RATIO = 1.5
TARGET_THROUGHPUT_RATIO = 3.0
CEILING_SIZES = (1, 4, 8, 16, 32)


@dataclass
class Gateway:
    name: str
    proc: subprocess.Popen[bytes]
    base: str
    latencies_ms: dict[int, list[float]] = field(default_factory=lambda: {n: [] for n in LEVELS})
    calls: dict[int, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    wall_s: dict[int, float] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))
    cpu_s: dict[int, float] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))

    def p(self, level: int, q: float) -> float:
        values = self.latencies_ms[level]
        return float(np.percentile(values, q)) if values else float("nan")

    def rate(self, level: int) -> float:
        return self.calls[level] / self.wall_s[level] if self.wall_s[level] else float("nan")

    def cpu_ms(self, level: int) -> float:
        """Gateway CPU time (user + system, all threads) per call."""
        return self.cpu_s[level] / self.calls[level] * 1000.0 if self.calls[level] else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_gateway(name: str, max_batch: int, wait_ms: float, passages: int, workdir: Path) -> Gateway:
    from rollout.retrieval import DenseParams, RetrievalParams

    config = workdir / f"{name}.json"
    params = RetrievalParams(dense=DenseParams(max_query_batch=max_batch, batch_wait_ms=wait_ms))
    config.write_text(json.dumps(params.to_dict()), encoding="utf-8")
    ready = workdir / f"{name}.url"
    cmd = [sys.executable, "-m", "rollout.gateway", "--config", str(ROOT / "conf/gateways/rag_dense_only.json"),
           "--port", "0", "--ready-file", str(ready), "--retriever-config", str(config),
           "--demo-passages", str(passages), "--log-level", "WARNING"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    deadline = time.monotonic() + 300
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"gateway {name} did not start (exit code {proc.poll()})")
        time.sleep(0.1)
    url = ready.read_text(encoding="utf-8").strip()
    return Gateway(name, proc, url.rsplit("/", 1)[0])


async def load(gateway: Gateway, callers: int, calls_each: int, queries: list[str], *, record: bool) -> None:
    """`callers` concurrent callers, each making `calls_each` calls one after another."""
    import httpx

    url = f"{gateway.base}/proxy/tools/{TOOL}/call"
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=callers, max_keepalive_connections=callers)
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:
        async def caller(c: int) -> None:
            for i in range(calls_each):
                query = queries[(c * calls_each + i) % len(queries)]
                t0 = time.perf_counter()
                reply = await client.post(url, json={"query": query, "top_k": TOP_K})
                latencies.append((time.perf_counter() - t0) * 1000.0)
                body = reply.json()
                if reply.status_code != 200 or body.get("is_error"):
                    raise RuntimeError(f"{gateway.name}: call failed ({reply.status_code}): {body}")

        # Connections open first, so the timed phase measures calls, not TCP handshakes.
        await asyncio.gather(*(client.get(f"{gateway.base}/healthz") for _ in range(callers)))
        t0, cpu0 = time.perf_counter(), cpu_seconds(gateway.proc.pid)
        await asyncio.gather(*(caller(c) for c in range(callers)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(gateway.proc.pid) - cpu0
    if record:
        gateway.latencies_ms[callers].extend(latencies)
        gateway.calls[callers] += len(latencies)
        gateway.wall_s[callers] += wall
        gateway.cpu_s[callers] += cpu


def encoder_ceiling(queries: list[str], passages: int) -> dict[int, float]:
    """Milliseconds per call of encode + one flat search, in this process with no gateway, by batch size."""
    from rollout.data import generate_demo_kb
    from rollout.retrieval import DenseParams, DenseRetriever, Encoder

    encoder = Encoder()
    corpus, _ = generate_demo_kb(n_passages=passages, n_questions=0)
    dense = DenseRetriever.from_vectors(encoder.encode_passages([p.contents for p in corpus]), encoder=encoder,
                                        params=DenseParams(max_query_batch=1))
    ms_per_call = {}
    for size in CEILING_SIZES:
        dense.search(queries[:size], TOP_K)  # warm
        times = []
        t_end = time.perf_counter() + 3.0
        while time.perf_counter() < t_end:
            for i in range(0, 64, size):
                t0 = time.perf_counter()
                dense.search(queries[i:i + size], TOP_K)
                times.append((time.perf_counter() - t0) * 1000.0)
        ms_per_call[size] = float(np.median(times))
    return ms_per_call


def report(gateways: list[Gateway], args: argparse.Namespace, ceiling: dict[int, float] | None) -> None:
    print(f"\ndense tool through /proxy, demo corpus {args.passages} passages, top_k={TOP_K}, rounds={args.rounds}, "
          f"batched: max_query_batch={args.max_batch} batch_wait_ms={args.wait_ms:g}")
    head = (f"{'gateway':<10} {'p50@1':>7} {'p95@1':>7} {'p50@8':>7} {'p95@8':>7} {'calls/s@8':>9} "
            f"{'p50@64':>7} {'calls/s@64':>10} {'cpu ms/call@64':>14} {'p50@8/p50@1':>11}")
    print(head)
    print("-" * len(head))
    for g in gateways:
        print(f"{g.name:<10} {g.p(1, 50):7.1f} {g.p(1, 95):7.1f} {g.p(8, 50):7.1f} {g.p(8, 95):7.1f} "
              f"{g.rate(8):9.1f} {g.p(64, 50):7.1f} {g.rate(64):10.1f} {g.cpu_ms(64):14.1f} "
              f"{g.p(8, 50) / g.p(1, 50):11.2f}")
    by_name = {g.name: g for g in gateways}
    b, u = by_name["batched"], by_name["unbatched"]
    latency_ratio = b.p(8, 50) / b.p(1, 50)
    throughput_ratio = b.rate(64) / u.rate(64)
    print(f"\nbatched p50@8 / p50@1 = {latency_ratio:.2f} (target <= {TARGET_LATENCY_RATIO}): "
          f"{'met' if latency_ratio <= TARGET_LATENCY_RATIO else 'NOT met'}")
    print(f"calls/s@64 batched / unbatched = {throughput_ratio:.2f} (target >= {TARGET_THROUGHPUT_RATIO}): "
          f"{'met' if throughput_ratio >= TARGET_THROUGHPUT_RATIO else 'NOT met'}")
    print(f"batched / unbatched p50@1 (idle cost of the window) = {b.p(1, 50) / u.p(1, 50):.2f}")
    if ceiling:
        print("\nencode + flat search in this process, no gateway (median ms per call / queries per s, by batch size):")
        print("  " + ", ".join(f"{n}: {ms:.1f} ms / {n / ms * 1000:.0f} q/s" for n, ms in ceiling.items()))
        best = max(ceiling, key=lambda n: n / ceiling[n])
        print(f"  floor for p50@8 / p50@1 from the encoder alone (8 queries in one call vs 1): "
              f"{ceiling[8] / ceiling[1]:.2f}")
        print(f"  ceiling for calls/s from the encoder alone (batch {best}): {best / ceiling[best] * 1000:.0f}; "
              f"that / unbatched calls/s@64 = {best / ceiling[best] * 1000 / u.rate(64):.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--wait-ms", type=float, default=2.0)
    p.add_argument("--calls-1", type=int, default=40, help="calls by the idle caller per round")
    p.add_argument("--calls-8", type=int, default=12, help="calls per caller at 8 callers per round")
    p.add_argument("--calls-64", type=int, default=3, help="calls per caller at 64 callers per round")
    p.add_argument("--no-ceiling", action="store_true", help="skip the in-process encoder measurement")
    args = p.parse_args()

    from rollout.data import generate_demo_kb

    _, questions = generate_demo_kb(n_passages=args.passages, n_questions=200)
    queries = [q.question for q in questions]
    calls_each = {1: args.calls_1, 8: args.calls_8, 64: args.calls_64}
    with tempfile.TemporaryDirectory() as tmp:
        gateways = [start_gateway("unbatched", 1, 0.0, args.passages, Path(tmp)),
                    start_gateway("batched", args.max_batch, args.wait_ms, args.passages, Path(tmp))]
        try:
            for g in gateways:  # first calls load lazily built pieces (torch kernels, pydantic schemas)
                asyncio.run(load(g, 8, 4, queries, record=False))
            for r in range(args.rounds):
                order = gateways if r % 2 == 0 else gateways[::-1]
                for g in order:
                    for level in LEVELS:
                        asyncio.run(load(g, level, calls_each[level], queries[r * 7:], record=True))
                        print(f"round {r + 1} {g.name:<10} {level:>2} callers: done", file=sys.stderr)
        finally:
            for g in gateways:
                g.proc.terminate()
            for g in gateways:
                g.proc.wait(30)
    ceiling = None if args.no_ceiling else encoder_ceiling(queries, args.passages)
    report(gateways, args, ceiling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
