"""The harness itself: throughput against the ideal, and the driver's memory over long runs.

    python bench/harness.py [--latency 0.1] [--turns 3] [--concurrency 8 32 128] [--memory-tasks 1000 10000]

Throughput. `agent=simulated` sleeps `--latency` per turn for `--turns` turns, so a task would
take turns x latency with an infinitely fast harness and the ideal throughput at C concurrent
tasks is C / (turns x latency). One gateway (sparse BM25 over the demo corpus) and one local Ray
(2 CPUs) serve every row; each row runs `--tasks-per-slot` x C tasks through the run's own
scheduler (2 actors, C/2 tasks each) and prints tasks/s in the steady state (between the first
and the last wave of C results, when C tasks are in flight; actor start-up and the final
ramp-down are left out) and its fraction of the ideal. Rows "LLM turns only" measure the
harness: Ray, the actors, the scheduler and the result handling. Rows "with tool calls" add a
real MCP call (BM25 search) in each turn but the last, so they are also bounded by what an MCP
call costs in CPU on both sides of the wire (about 7 ms with the bare `mcp` SDK here, see
bench/gateway_load.py): their tool calls/s column shows that ceiling being reached.
Target: at least 0.8 of the ideal at 128.

Memory. The whole command (`python -m rollout agent=simulated ...`) on 1,000 and on 10,000
questions, each in a fresh process; the driver reports its own peak RSS (VmHWM) as it exits.
Target: flat (10k/1k close to 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import ray

from rollout.data.dataset import prepare_data
from rollout.paths import PROJECT_ROOT, default_cache_dir
from rollout.records import Question, TaskResult
from rollout.run.config import RunConfig, compose_run_config
from rollout.run.gateway_kinds import gateway_for_run
from rollout.run.ray_start import lean_start
from rollout.run.scheduler import PlannedTask, Scheduler
from rollout.run.serving import env_spec_for

PEAK_FILE_ENV = "ROLLOUT_BENCH_PEAK_FILE"


def many(questions: Sequence[Question], n: int) -> list[Question]:
    """n questions with distinct ids, cycling through the given ones."""
    questions = list(questions)
    return [replace(questions[i % len(questions)], id=f"{questions[i % len(questions)].id}-{i}") for i in range(n)]


def throughput(cfg: RunConfig, url: str, questions: list[Question], concurrency: int, tasks_per_slot: int) -> tuple[float, float]:
    """(tasks per second, mean task latency s) for `concurrency` tasks in flight."""
    run_cfg = replace(cfg, workers=2, concurrency_per_worker=max(1, concurrency // 2))
    latencies: list[float] = []
    arrivals: list[float] = []

    def on_result(result: TaskResult) -> None:
        if result.error:
            raise RuntimeError(f"task {result.id} failed: {result.error}")
        latencies.append(result.latency_s)
        arrivals.append(time.perf_counter())

    tasks = many(questions, max(3, tasks_per_slot) * concurrency)
    env_spec = env_spec_for(run_cfg.gateway, run_cfg.gateway_config_path, run_cfg.system_prompt, url, run_id="bench")
    scheduler = Scheduler(run_cfg.worker_pool, env_spec, on_result=on_result)
    scheduler.run([PlannedTask(q) for q in tasks])
    # Steady state: between the first and the last wave, when `concurrency` tasks are in flight.
    # The actors' start-up (once per run, seconds) and the ramp-down at the end are left out.
    first, last = concurrency, len(arrivals) - concurrency
    return (last - first) / (arrivals[last - 1] - arrivals[first - 1]), sum(latencies) / len(latencies)


def bench_throughput(args: argparse.Namespace, cache_dir: Path) -> list[tuple[str, ...]]:
    rows = []
    ledger_dir = tempfile.mkdtemp(prefix="rollout-bench-")  # the gateway's call ledger, not results/

    def config(call_tools: bool) -> RunConfig:
        return compose_run_config(
            "mode=sparse", "agent=simulated", f"agent.llm_latency_s={args.latency}", f"agent.turns={args.turns}",
            f"agent.call_tools={str(call_tools).lower()}", f"cache_dir={cache_dir}", "task_timeout_s=600",
            f"output_dir={ledger_dir}")

    configs = {call_tools: config(call_tools) for call_tools in (True, False)}
    data = prepare_data(configs[True].dataset, cache_dir)
    ideal_latency = args.turns * args.latency
    # One gateway for every row: the agent's settings are all that differ between them.
    with gateway_for_run(configs[True].gateway_launch, data.corpus_path) as gateway:
        url = gateway.wait_ready()
        throughput(configs[True], url, data.questions, 8, 2)  # warm: the gateway's sessions and page cache
        for call_tools, cfg in configs.items():
            for c in args.concurrency:
                rate, latency = throughput(cfg, url, data.questions, c, args.tasks_per_slot)
                ideal = c / ideal_latency
                label = "with tool calls" if call_tools else "LLM turns only"
                calls = rate * (args.turns - 1) if call_tools else 0.0
                rows.append((label, str(c), f"{rate:,.1f}", f"{ideal:,.1f}", f"{rate / ideal:.2f}",
                             f"{latency * 1000:,.0f} ms", f"{calls:,.0f}"))
                print(f"  {label:16} concurrency {c:4}: {rate:8.1f} tasks/s of {ideal:8.1f} ideal", flush=True)
    return rows


def driver_peak_mib(n_tasks: int, cache_dir: Path, questions_file: Path, corpus_file: Path) -> tuple[float, float]:
    """(peak RSS MiB of the driver, wall s) of the whole command on n_tasks questions."""
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        peak_file = Path(tmp) / "peak"
        cmd = [
            sys.executable, __file__, "--as-driver", "--", "mode=sparse", "agent=simulated",
            "agent.llm_latency_s=0.01", "agent.call_tools=false", "dataset=files",
            f"dataset.corpus.path={corpus_file}", f"dataset.questions.path={questions_file}",
            f"dataset.limit={n_tasks}", f"output_dir={tmp}/run", f"cache_dir={cache_dir}",
            "workers=2", "concurrency_per_worker=64", "progress=false",
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=PROJECT_ROOT, env={**os.environ, PEAK_FILE_ENV: str(peak_file)},
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        n_done = sum(1 for _ in (Path(tmp) / "run" / "trajectory.jsonl").open())
        if n_done != n_tasks:
            raise RuntimeError(f"the {n_tasks}-task run finished {n_done} tasks")
        return float(peak_file.read_text()) / 1024, wall


def bench_memory(args: argparse.Namespace, cache_dir: Path) -> list[tuple[float, float]]:
    """The driver's (peak MiB, wall s) for each of `--memory-tasks`."""
    cfg = compose_run_config("mode=sparse", f"cache_dir={cache_dir}")
    data = prepare_data(cfg.dataset, cfg.cache_dir)
    peaks = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-q-") as tmp:
        questions_file = Path(tmp) / "questions.jsonl"
        with questions_file.open("w", encoding="utf-8") as f:
            for q in many(data.questions, max(args.memory_tasks)):
                f.write(json.dumps(q.to_json()) + "\n")
        for n in args.memory_tasks:
            peak, wall = driver_peak_mib(n, cache_dir, questions_file, data.corpus_path)
            peaks.append((peak, wall))
            print(f"  driver over {n:9,} tasks: peak {peak:,.0f} MiB in {wall:.1f} s", flush=True)
    return peaks


def gateway_stop_s(n_sessions: int, cache_dir: Path) -> tuple[float, int]:
    """(seconds from stop() to exit, calls in flight at the stop) for a launched gateway with `n_sessions` open
    MCP sessions, a quarter of them sending calls back to back while it is asked to stop."""
    import asyncio

    from rollout.mcp_client.session import McpSession
    from rollout.run.gateway_process import GatewayProcess

    async def measure() -> tuple[float, int]:
        with tempfile.TemporaryDirectory(prefix="rollout-bench-stop-") as tmp:
            gw = GatewayProcess(["--config", str(PROJECT_ROOT / "conf/gateways/rag_sparse_only.json"),
                                 "--cache-dir", str(cache_dir), "--output-dir", tmp, "--no-report",
                                 "-q"])
            gw.launch()
            url = await asyncio.to_thread(gw.wait_ready)
            sessions = [McpSession(url, name=f"bench-{i}", reconnect_timeout_s=1.0) for i in range(n_sessions)]
            clients = []
            for i in range(0, n_sessions, 16):
                clients += await asyncio.gather(*(s.open(60) for s in sessions[i:i + 16]))
            stopping = asyncio.Event()
            in_flight = 0

            async def busy(client: object) -> None:
                nonlocal in_flight
                while not stopping.is_set():
                    in_flight += 1
                    try:
                        await client.call_tool("query_knowledge_base_sparse", {"query": "city", "top_k": 3})
                    except Exception:  # noqa: BLE001 - the gateway going away mid-call is the point
                        return
                    finally:
                        in_flight -= 1

            callers = [asyncio.create_task(busy(c)) for c in clients[: max(1, n_sessions // 4)]]
            await asyncio.sleep(1.0)
            at_stop = in_flight
            t0 = time.perf_counter()
            await asyncio.to_thread(gw.stop)
            stopped = time.perf_counter() - t0
            stopping.set()
            for c in callers:
                c.cancel()
            await asyncio.gather(*callers, return_exceptions=True)
            await asyncio.wait_for(asyncio.gather(*(s.close() for s in sessions), return_exceptions=True), 30)
            return stopped, at_stop

    return asyncio.run(measure())


def _as_driver(overrides: list[str]) -> None:
    """Run the command as a user would, then record this process's peak RSS."""
    import atexit

    def record_peak() -> None:
        status = Path("/proc/self/status").read_text()
        kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
        Path(os.environ[PEAK_FILE_ENV]).write_text(kib)

    atexit.register(record_peak)
    from rollout.run.app import main

    main(overrides)


def _table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def main() -> None:
    if "--as-driver" in sys.argv:
        _as_driver(sys.argv[sys.argv.index("--") + 1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1, help="simulated LLM seconds per turn")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--tasks-per-slot", type=int, default=30, help="tasks per row = this x concurrency")
    parser.add_argument("--memory-tasks", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--stop-sessions", type=int, nargs="*", default=[128],
                        help="open MCP sessions when the gateway is asked to stop (none: skip the stop rows)")
    args = parser.parse_args()

    if not args.skip_throughput:
        with lean_start():  # as a run starts its own Ray
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            print("throughput (agent=simulated):", flush=True)
            rows = bench_throughput(args, args.cache_dir)
        finally:
            ray.shutdown()
        _table(
            f"Throughput: {args.turns} turns x {args.latency * 1000:.0f} ms simulated LLM per task, 2 actors, 2 cores",
            ("policy", "concurrent", "tasks/s", "ideal", "fraction", "mean task", "tool calls/s"), rows,
        )
    for n in args.stop_sessions:
        stopped, at_stop = gateway_stop_s(n, args.cache_dir)
        print(f"gateway stop with {n} open sessions ({at_stop} calls in flight): {stopped:.2f} s "
              f"(load average {Path('/proc/loadavg').read_text().split()[0]})", flush=True)
    if not args.skip_memory:
        print("\ndriver memory (whole command, fresh process each):", flush=True)
        peaks = bench_memory(args, args.cache_dir)
        rows = [(f"{n:,} tasks", f"{peak:,.0f} MiB", f"{wall:,.0f} s", f"{n / wall:,.0f}",
                 "-" if i == 0 else f"{peak / peaks[i - 1][0]:.3f}x")
                for i, (n, (peak, wall)) in enumerate(zip(args.memory_tasks, peaks, strict=True))]
        _table("Driver peak memory (VmHWM)", ("run", "peak", "wall", "tasks/s", "peak / row above"), rows)
        first, last = args.memory_tasks[0], args.memory_tasks[-1]
        print(f"\npeak {last:,} / {first:,} tasks: {peaks[-1][0] / peaks[0][0]:.3f}x")
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
