"""Gateway under load: 64 MCP sessions x 50 calls each on loopback, beside bare `mcp` servers in the same run.

    python bench/gateway_load.py [--sessions 64] [--calls 50] [--rounds 2] [--client-procs 2] [--passages 2000]
                                 [--replicas 2]

Every server runs in a child process of its own (this script with `--serve`). The load comes
from `--client-procs` client processes that split the sessions: each opens its sessions first,
all start calling at once (a barrier), calls go one after another within a session, and every
call carries a unique `rollout/call_id`. Servers:

  bare-echo    `mcp` MCPServer, no middleware, one echo tool: the SDK and transport floor
  bare-result  `mcp` MCPServer, no middleware, one tool returning a prebuilt SearchResult of the
               same top_k passages gw-echo returns: the floor for the same reply
  gw-echo      our gateway (build_gateway: stats middleware, the registry's retrieval tool and its
               KnowledgeBase wrapper) serving query_knowledge_base_sparse over a constant-time
               retriever that returns the first top_k passages: the wrapper without retrieval cost
  gw-nostats   gw-echo without a stats collector: what the stats middleware alone adds
  gw-bm25      the real sparse tool over BM25 on the generated demo corpus
  gw-bm25-stateless  gw-bm25 serving stateless streamable HTTP (no MCP session kept between
               requests), as each Ray Serve replica does: what dropping session affinity costs
  serve-bm25xN gw-bm25 as N Ray Serve replicas behind Serve's HTTP proxy (`gateway.replicas=N`,
               `--replicas N`, 0 leaves it out); its server CPU is the whole Ray process tree
               (GCS, raylet, controller, proxy, replicas), and its ledger is the N replica ledgers

The bare servers get the SDK's own client with default settings (`Client(url)`); the gateways get
the client a rollout worker uses (`envs.HttpMCPEnv`), so both sides of the wire are what a run pays. Figures per server, pooled over the rounds (servers take turns, in alternating
order, so drift hits all alike): calls/s over the load phases; client round-trip p50/p95; CPU per
call of the server (user+system time of the server process during the load phases / calls), of
the client processes (the same, measured in each client process between the barriers) and of
both; gateway-side p50 from the stats records; and, for gateways recording stats, the ledger:
call ids sent vs recorded (lost, duplicated, unexpected).

Targets: the stats middleware and the wrapper add at most 50% to the bare round trip, i.e. gw-echo
p50 / bare-result p50 <= 1.5; and a call costs at most 0.6x the CPU (client + server) of the bare
SDK server giving the same reply, i.e. gw-echo / bare-result client+server CPU per call <= 0.6.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from rollout.gateway.knowledge import KnowledgeBase, SearchResult

BASE_KINDS = ("bare-echo", "bare-result", "gw-echo", "gw-nostats", "gw-bm25", "gw-bm25-stateless")
SERVE_KIND = "serve-bm25x"
TOP_K = 5
TARGET_RATIO = 1.5
TARGET_CPU_RATIO = 0.6


# ---------------------------------------------------------------- servers (child processes)


class ConstantRetriever:
    """Returns rows 0..k-1 with score 1 for every query: retrieval at no cost."""

    def search(self, queries: Sequence[str], k: int) -> Any:
        from rollout.retrieval import Hits

        return Hits(np.tile(np.arange(k, dtype=np.int64), (len(queries), 1)),
                    np.ones((len(queries), k), dtype=np.float32))


def bare_server(kind: str, corpus: list[Any]) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(kind, log_level="WARNING")
    if kind == "bare-echo":
        @server.tool()
        def echo(text: str) -> str:
            """Return the text unchanged."""
            return text
    else:
        reply = KnowledgeBase(corpus, {"sparse": ConstantRetriever()}).search("sparse", "prebuilt", TOP_K)

        @server.tool()
        def search(query: str, top_k: int = TOP_K) -> SearchResult:
            """The same SearchResult for every query."""
            return reply
    return server


def gateway_server(kind: str, corpus: list[Any], stats_dir: Path) -> Any:
    from rollout.gateway.server import build_gateway
    from rollout.gateway.stats import StatsCollector
    from rollout.gateway_file import GATEWAYS_DIR, load_gateway_file
    from rollout.retrieval import BM25Retriever

    retriever = BM25Retriever.build(corpus) if kind.startswith("gw-bm25") else ConstantRetriever()
    collector = None if kind == "gw-nostats" else StatsCollector(stats_dir)
    gateway = load_gateway_file(GATEWAYS_DIR / "rag_sparse_only.json")
    return build_gateway(gateway, KnowledgeBase(corpus, {"sparse": retriever}), collector)


def serve(kind: str, passages: int, url_file: Path, stats_dir: Path) -> None:
    import logging

    import uvicorn

    from rollout.data import generate_demo_kb
    from rollout.gateway.http_app import gateway_app
    from rollout.gateway.server import make_uvicorn
    from rollout.listen import bind_socket

    logging.basicConfig(level=logging.WARNING)
    if kind.startswith(SERVE_KIND):
        serve_replicas(int(kind.removeprefix(SERVE_KIND)), passages, url_file, stats_dir)
        return
    corpus, _ = generate_demo_kb(n_passages=passages, n_questions=0)
    sock = bind_socket("127.0.0.1", 0)  # the gateway's own binding (TCP_NODELAY) for every server
    if kind.startswith("bare"):
        app = bare_server(kind, corpus).streamable_http_app()
        uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    elif kind.endswith("-stateless"):
        app = gateway_app(gateway_server(kind, corpus, stats_dir), stateless=True)
        uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    else:
        uv = make_uvicorn(gateway_server(kind, corpus, stats_dir))
    announce(url_file, f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(uv.serve(sockets=[sock]))


def serve_replicas(replicas: int, passages: int, url_file: Path, stats_dir: Path) -> None:
    """The sparse gateway as `replicas` Ray Serve replicas, as a run with `gateway.replicas=N` deploys it."""
    import logging

    import ray

    from rollout.gateway_file import GATEWAYS_DIR
    from rollout.retrieval.params import RetrievalParams
    from rollout.run.gateway_serve import ServeGateway

    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    argv = ["--config", str(GATEWAYS_DIR / "rag_sparse_only.json"), "--demo-passages", str(passages),
            "--cache-dir", str(stats_dir.parent / "cache"), "--output-dir", str(stats_dir.parent / "serve-out")]
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    # Each replica reserves no CPU: on this 2-core machine the bench measures routing, not reservations.
    with ServeGateway(argv, RetrievalParams().to_dict(), replicas=replicas, replica_cpus=0) as gateway:
        announce(url_file, gateway.wait_ready())
        stopped.wait()
    ray.shutdown()


def announce(url_file: Path, url: str) -> None:
    tmp = url_file.with_suffix(".tmp")
    tmp.write_text(url)
    tmp.replace(url_file)


# ---------------------------------------------------------------- clients (pool processes)


def call_spec(kind: str, query: str) -> tuple[str, dict[str, Any]]:
    if kind == "bare-echo":
        return "echo", {"text": query}
    if kind == "bare-result":
        return "search", {"query": query, "top_k": TOP_K}
    return "query_knowledge_base_sparse", {"query": query, "top_k": TOP_K}


def client_phase(url: str, kind: str, first: int, sessions: int, calls: int, tag: str, queries: list[str],
                 start: Any, end: Any) -> dict[str, Any]:
    """Run `sessions` sessions (numbered from `first`) against `url`; the barriers frame the calls."""
    try:
        return asyncio.run(_client_phase(url, kind, first, sessions, calls, tag, queries, start, end))
    except BaseException:
        start.abort()  # the parent and the other clients stop waiting and see this error
        end.abort()
        raise


async def _client_phase(url: str, kind: str, first: int, sessions: int, calls: int, tag: str,
                        queries: list[str], start: Any, end: Any) -> dict[str, Any]:
    from mcp.client.client import Client

    from envs import HttpMCPEnv
    from rollout.gateway_file import GATEWAYS_DIR
    from rollout.wire import META_CALL_ID, result_text

    opened, all_open, go, done = 0, asyncio.Event(), asyncio.Event(), asyncio.Event()
    finished, sent, latencies, errors = 0, [], [], 0

    async def bare(s: int) -> None:
        """The bare SDK with its defaults: `Client(url)`, `call_tool`, the text an agent reads."""
        async with Client(url) as client:
            await client.list_tools()  # caches the output schemas, as a rollout worker does at start
            await calls_of(s, lambda tool, args, call_id: client.call_tool(tool, args, meta={META_CALL_ID: call_id}),
                           lambda result: (result_text(result), bool(result.is_error)))

    async def env(s: int) -> None:
        """The client a rollout worker opens: `HttpMCPEnv`, its session, calls and records."""
        async with HttpMCPEnv(url, GATEWAYS_DIR / "rag_sparse_only.json", worker_id=f"{tag}-{s}") as e:
            await calls_of(s, lambda tool, args, call_id: e.call(tool, args, task_id=f"{tag}-{s}", call_id=call_id),
                           lambda answer: (answer[0].text, not answer[0].ok))

    async def calls_of(s: int, call: Any, read: Any) -> None:
        nonlocal opened, finished, errors
        opened += 1
        if opened == sessions:
            all_open.set()
        await go.wait()
        for i in range(calls):
            call_id = f"{tag}-{s}-{i}"
            tool, args = call_spec(kind, queries[(s * calls + i) % len(queries)])
            sent.append(call_id)
            t0 = time.perf_counter()
            _, error = read(await call(tool, args, call_id))
            latencies.append((time.perf_counter() - t0) * 1000.0)
            errors += error
        finished += 1
        if finished == sessions:
            done.set()
        await end_passed.wait()  # sessions close after the parent read the server's CPU time

    end_passed = asyncio.Event()
    session = bare if kind.startswith("bare") else env
    tasks = [asyncio.create_task(session(first + s)) for s in range(sessions)]
    await _first_of(all_open.wait(), tasks)
    await asyncio.to_thread(start.wait, 120)
    t0, cpu0 = time.time(), time.process_time()
    go.set()
    await _first_of(done.wait(), tasks)
    t1, cpu = time.time(), time.process_time() - cpu0
    await asyncio.to_thread(end.wait, 600)
    end_passed.set()
    await asyncio.gather(*tasks)
    return {"sent": sent, "latencies": latencies, "errors": errors, "t0": t0, "t1": t1, "cpu": cpu}


async def _first_of(event_wait: Any, tasks: list[asyncio.Task[None]]) -> None:
    waiter = asyncio.ensure_future(event_wait)
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:  # a session that failed surfaces here instead of hanging the barrier
        if t.done() and t.exception() is not None:
            waiter.cancel()
            raise t.exception()  # type: ignore[misc]


# ---------------------------------------------------------------- the run (this process)


@dataclass
class Server:
    kind: str
    proc: subprocess.Popen[bytes]
    url: str
    stats_dir: Path
    """Where its call ledgers are (`realtime_calls*.jsonl`: one per replica for a Serve gateway)."""
    sent: list[str] = field(default_factory=list)
    load_ids: set[str] = field(default_factory=set)
    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    errors: int = 0

    @property
    def calls(self) -> int:
        return len(self.latencies_ms)

    @property
    def cpu_ms_per_call(self) -> float:
        """Server CPU per call."""
        return self.cpu_s / self.calls * 1000.0

    @property
    def client_cpu_ms_per_call(self) -> float:
        return self.client_cpu_s / self.calls * 1000.0

    @property
    def total_cpu_ms_per_call(self) -> float:
        """Client + server CPU per call."""
        return self.cpu_ms_per_call + self.client_cpu_ms_per_call

    def p(self, q: float) -> float:
        return pct(self.latencies_ms, q)

    @property
    def ledgers(self) -> list[Path]:
        return sorted(self.stats_dir.glob("realtime_calls*.jsonl")) if self.stats_dir.is_dir() else []


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and every live descendant, from /proc."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                    for c in (t / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return total
    return total + sum(cpu_seconds(c) for c in children)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def start_server(kind: str, passages: int, workdir: Path) -> Server:
    url_file, stats_dir = workdir / f"{kind}.url", workdir / kind
    cmd = [sys.executable, __file__, "--serve", kind, "--passages", str(passages),
           "--url-file", str(url_file), "--stats-dir", str(stats_dir)]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 300
    while not url_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{kind} server did not start (exit code {proc.poll()})")
        time.sleep(0.05)
    ledgers = stats_dir.parent / "serve-out" / "tool_stats" if kind.startswith(SERVE_KIND) else stats_dir
    return Server(kind, proc, url_file.read_text(), ledgers)


def phase(pool: ProcessPoolExecutor, manager: Any, server: Server, procs: int, sessions: int, calls: int,
          tag: str, queries: list[str], measure: bool) -> None:
    start, end = manager.Barrier(procs + 1), manager.Barrier(procs + 1)
    shares = [sessions // procs + (i < sessions % procs) for i in range(procs)]
    firsts = [sum(shares[:i]) for i in range(procs)]
    futures = [pool.submit(client_phase, server.url, server.kind, f, n, calls, tag, queries, start, end)
               for f, n in zip(firsts, shares, strict=True)]
    try:
        start.wait(180)
        cpu0 = cpu_seconds(server.proc.pid)
        end.wait(600)
        cpu = cpu_seconds(server.proc.pid) - cpu0
    except threading.BrokenBarrierError:
        for f in futures:
            f.result()  # raises the client's error
        raise
    results = [f.result() for f in futures]
    for r in results:
        server.sent.extend(r["sent"])
    if measure:
        server.cpu_s += cpu
        server.wall_s += max(r["t1"] for r in results) - min(r["t0"] for r in results)
        for r in results:
            server.client_cpu_s += r["cpu"]
            server.latencies_ms.extend(r["latencies"])
            server.load_ids.update(r["sent"])
            server.errors += r["errors"]


def ledger(server: Server) -> tuple[int, int, int, int, list[float]]:
    """(sent, lost, duplicated, unexpected, gateway-side durations of load calls) from the call ledgers."""
    lines = [json.loads(line) for path in server.ledgers for line in path.read_text().splitlines() if line.strip()]
    recorded = Counter(str(r["call_id"]) for r in lines)
    sent = Counter(server.sent)
    lost = sum(1 for c in sent if c not in recorded)
    duplicated = sum(n - 1 for n in recorded.values() if n > 1)
    unexpected = sum(1 for c in recorded if c not in sent)
    durations = [float(r["duration_ms"]) for r in lines if r["call_id"] in server.load_ids]
    return sum(sent.values()), lost, duplicated, unexpected, durations


def report(servers: dict[str, Server], args: argparse.Namespace) -> None:
    base = servers["bare-result"]
    print(f"\n{args.sessions} sessions ({args.client_procs} client processes) x {args.calls} calls x {args.rounds} "
          f"rounds per server, loopback, {os.cpu_count()} cores; gateway tool query_knowledge_base_sparse"
          f"(top_k={TOP_K}) on a {args.passages}-passage demo corpus\n")
    header = (f"{'server':<18}{'calls':>7}{'errors':>7}{'calls/s':>9}{'p50 ms':>9}{'p95 ms':>9}"
              f"{'server cpu':>11}{'client cpu':>11}{'c+s cpu':>9}{'gw p50 ms':>10}{'p50 ratio':>10}"
              f"{'cpu ratio':>10}  stats ledger (call ids sent vs recorded)")
    print(header)
    print("-" * len(header))
    for kind, s in servers.items():
        gw_p50, check = "", "-"
        if s.ledgers:
            sent, lost, dup, unexpected, durations = ledger(s)
            gw_p50 = f"{pct(durations, 50):.2f}"
            check = f"sent {sent}: lost {lost}, duplicated {dup}, unexpected {unexpected}"
        print(f"{kind:<18}{s.calls:>7}{s.errors:>7}{s.calls / s.wall_s:>9.0f}{s.p(50):>9.2f}{s.p(95):>9.2f}"
              f"{s.cpu_ms_per_call:>11.3f}{s.client_cpu_ms_per_call:>11.3f}{s.total_cpu_ms_per_call:>9.3f}"
              f"{gw_p50:>10}{s.p(50) / base.p(50):>10.2f}{s.total_cpu_ms_per_call / base.total_cpu_ms_per_call:>10.2f}"
              f"  {check}")
    print("(cpu: ms per call; ratios: / bare-result, the bare server giving the same reply; "
          "cpu ratio: client + server)\n")

    def ratio(a: str, b: str) -> str:
        x, y = servers[a], servers[b]
        return (f"{x.p(50) / y.p(50):.2f}x round-trip p50, {x.cpu_ms_per_call / y.cpu_ms_per_call:.2f}x server "
                f"CPU, {x.total_cpu_ms_per_call / y.total_cpu_ms_per_call:.2f}x client+server CPU per call")

    print(f"gateway overhead, stats middleware + wrapper (gw-echo / bare-result): {ratio('gw-echo', 'bare-result')}")
    print(f"  stats middleware alone           (gw-echo / gw-nostats):  {ratio('gw-echo', 'gw-nostats')}")
    print(f"  against the bare echo            (gw-echo / bare-echo):   {ratio('gw-echo', 'bare-echo')}")
    print(f"with BM25 on {args.passages} passages        (gw-bm25 / bare-result): {ratio('gw-bm25', 'bare-result')}")
    print(f"  stateless, as a Serve replica    (gw-bm25-stateless / gw-bm25): {ratio('gw-bm25-stateless', 'gw-bm25')}")
    for kind in (k for k in servers if k.startswith(SERVE_KIND)):
        print(f"  {kind.removeprefix(SERVE_KIND)} Ray Serve replicas            ({kind} / gw-bm25): {ratio(kind, 'gw-bm25')}"
              f", {servers[kind].calls / servers[kind].wall_s / (servers['gw-bm25'].calls / servers['gw-bm25'].wall_s):.2f}x calls/s")
    overhead = servers["gw-echo"].p(50) / base.p(50)
    verdict = "met" if overhead <= TARGET_RATIO else "NOT met"
    print(f"target: the stats middleware and wrapper add at most {TARGET_RATIO - 1:.0%} to the bare round trip "
          f"-> {verdict} ({overhead:.2f}x)")
    cpu = servers["gw-echo"].total_cpu_ms_per_call / base.total_cpu_ms_per_call
    verdict = "met" if cpu <= TARGET_CPU_RATIO else "NOT met"
    print(f"target: client + server CPU per call at most {TARGET_CPU_RATIO}x the bare SDK server with default "
          f"settings (gw-echo / bare-result) -> {verdict} ({cpu:.2f}x)")


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Server]:
    from rollout.data import generate_demo_kb

    kinds = (*BASE_KINDS, *([f"{SERVE_KIND}{args.replicas}"] if args.replicas else []))
    corpus, _ = generate_demo_kb(n_passages=args.passages, n_questions=0)
    queries = [p.title for p in corpus]
    servers: dict[str, Server] = {}
    ctx = get_context("spawn")
    try:
        for kind in kinds:
            servers[kind] = start_server(kind, args.passages, workdir)
        with ctx.Manager() as manager, ProcessPoolExecutor(args.client_procs, mp_context=ctx) as pool:
            for s in servers.values():
                phase(pool, manager, s, args.client_procs, args.client_procs, 20, "warm", queries, measure=False)
            for r in range(args.rounds):
                for kind in kinds if r % 2 == 0 else tuple(reversed(kinds)):
                    phase(pool, manager, servers[kind], args.client_procs, args.sessions, args.calls, f"r{r}",
                          queries, measure=True)
                    print(f"round {r + 1}/{args.rounds} {kind}: done", file=sys.stderr)
        return servers
    finally:
        for s in servers.values():
            s.proc.terminate()
        for s in servers.values():
            s.proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=64, help="concurrent MCP sessions")
    p.add_argument("--calls", type=int, default=50, help="calls per session per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--client-procs", type=int, default=2, help="client processes the sessions are split over")
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--replicas", type=int, default=2, help="Ray Serve replicas of the serve-bm25xN row; 0 leaves it out")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--url-file", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--stats-dir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.passages, args.url_file, args.stats_dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="gateway-load-") as tmp:
        servers = run(args, Path(tmp))
        report(servers, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
