"""Tasks/s of rollout against llama.cpp's llama-server at --parallel 1, 2 and 4, beside the server's own time.

    python -m bench.llm_speed [--questions 8] [--parallel 1 2 4] [--threads auto 1] [--smoke]

From a checkout, as a module: it serves the tests' model (tests/llm_server/qwen.py) with the tests' llama-server
(tests/llm_server/jinja_server.py).

Each --parallel gets a fresh `llama-server` serving Qwen2.5-Coder-0.5B-Instruct as docs/agents.md starts it (`--jinja
--no-repack --ctx-size 16384 --parallel N`, and `--metrics` for its token counters), in turn, one at a time, and
one whole run of the documented recipe against it (`python -m rollout agent=openai agent.tool_choice=required
agent.text_tool_calls=parse mode=sparse agent.max_turns=3 llm.sampling.max_tokens=128`, temperature 0 and `seed=0`
so the rows are comparable) over the demo's first `--questions` questions, as many tasks at once as the server has
slots (`workers=1 concurrency_per_worker=N`). With several `--threads` (`auto`: llama.cpp's own choice, one a core)
each --parallel is run at each of them in turn, side by side.

Figures come from the run's own records and the server's counters, with nothing between rollout and the server:
each LLM reply in trajectory.jsonl keeps when it was sent, how long the request took and the server's own time for
it (llama.cpp's `timings`: prompt_ms + predicted_ms), so the server was busy with the run over the union of
[answered - server time, answered]; `/metrics` before and after the run gives the tokens it read and wrote and the
time it spent on each. Per row:

- tasks/s over the tasks phase: from the first task's first request to the last task's end (the command's wall
  time, with Ray's and the gateway's start, is printed beside it);
- model time: the sum of prompt + predicted ms over all the run's requests, and the server's busy wall time;
- harness share = (tasks phase - busy) / tasks phase: the time the server waited on rollout (the agent loop, the
  tool calls, the records, the scheduler) while a task was running. Target: at most 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from rollout.paths import PROJECT_ROOT
from tests.llm_server.jinja_server import llama_server_binary
from tests.llm_server.qwen import ALIAS, MODELS, qwen
from tests.llm_server.server import LlamaMissing, served

TARGET_SHARE = 0.05
"""The harness's share of the tasks phase this bench checks against."""
RECIPE = ("agent=openai", "agent.tool_choice=required", "agent.text_tool_calls=parse", "mode=sparse",
          "agent.max_turns=3", f"llm.model={ALIAS}", "llm.sampling.max_tokens=128", "llm.sampling.temperature=0",
          "seed=0", "workers=1", "progress=false", "verbose=-1", "llm.timeout_s=600", "task_timeout_s=3600")
"""docs/agents.md's recipe for the 0.5B, sampled greedily with a fixed seed."""
SMOKE = ("llm.sampling.max_tokens=24", "agent.max_turns=2")
"""--smoke's replies: short and few, so that the check that every figure is filled costs seconds of model time."""
AUTO = "auto"
"""`--threads auto`: llama-server chooses (one thread a core)."""
COUNTERS = ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total")
"""llama-server's `/metrics` counters read before and after each run."""


@dataclass(frozen=True, slots=True)
class Row:
    """One run: a server at `parallel` slots on `threads` threads."""

    parallel: int
    threads: str
    tasks: int
    requests: int
    written: int
    """Completion tokens of the run's requests."""
    command_s: float
    """The whole `python -m rollout` command, start-up included."""
    phase_s: float
    """From the first task's first request to the last task's end."""
    model_s: float
    """The sum of prompt_ms + predicted_ms over the run's requests, in seconds."""
    busy_s: float
    """The time the server was busy with at least one of the run's requests."""
    counters: dict[str, float]
    """What `/metrics` counted during the run (the preflight's requests included: read as rates only)."""

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.phase_s

    @property
    def harness_share(self) -> float:
        return max(0.0, self.phase_s - self.busy_s) / self.phase_s


def server_argv(binary: Path, model: Path, parallel: int, threads: str, port: int) -> list[str]:
    """docs/agents.md's command line, with `--metrics` for the token counters (and `threads` unless `auto`)."""
    chosen = [] if threads == AUTO else ["--threads", threads, "--threads-batch", threads]
    return [str(binary), "--model", str(model), "--alias", ALIAS, "--jinja", "--no-repack", "--ctx-size", "16384",
            "--parallel", str(parallel), "--metrics", *chosen, "--host", "127.0.0.1", "--port", str(port)]


def metrics(api_root: str) -> dict[str, float]:
    """llama-server's counters (`llamacpp:NAME value` lines of `/metrics`)."""
    text = httpx.get(api_root.removesuffix("/v1") + "/metrics", timeout=30).text
    found = {m[1]: float(m[2]) for m in re.finditer(r"^llamacpp:(\w+)\s+(\S+)$", text, re.M)}
    return {name: found.get(name, 0.0) for name in COUNTERS}


def union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of [start, end] intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def measure(folder: Path, parallel: int, threads: str, command_s: float, counters: dict[str, float]) -> Row:
    """The row of the run in `folder`, from its trajectory.jsonl."""
    tasks = [json.loads(line) for line in (folder / "trajectory.jsonl").read_text().splitlines() if line.strip()]
    failed = [t["id"] for t in tasks if t["status"] != "ok"]
    if failed:
        raise RuntimeError(f"tasks {', '.join(failed)} did not end ok; see {folder}")
    replies = [e for t in tasks for e in t["events"] if e["type"] == "llm_output"]
    if any(e.get("server_ms") is None for e in replies):
        raise RuntimeError("a reply carries no server time: is the server llama.cpp's llama-server?")
    answered = [(e["sent"] + e["request_ms"] / 1000, e["server_ms"] / 1000) for e in replies]
    first = min(e["sent"] for e in replies)
    last = max(max(e["t"] for e in t["events"]) for t in tasks)
    written = sum((e.get("usage") or {}).get("completion_tokens", 0) for e in replies)
    return Row(parallel, threads, len(tasks), len(replies), written, command_s, last - first,
               sum(s for _, s in answered), union_s((end - s, end) for end, s in answered), counters)


def one_run(parallel: int, threads: str, args: argparse.Namespace, binary: Path, model: Path, work: Path) -> Row:
    """A fresh server at `parallel` slots on `threads` threads and one run of the recipe against it."""
    folder = work / f"parallel-{parallel}-threads-{threads}"
    log = work / f"llama-server-{parallel}-{threads}.log"
    with served(lambda port: server_argv(binary, model, parallel, threads, port), log) as api_root:
        before = metrics(api_root)
        command = [sys.executable, "-m", "rollout", *RECIPE, *(SMOKE if args.smoke else ()),
                   f"dataset.limit={args.questions}",
                   f"concurrency_per_worker={parallel}", f"llm.base_url={api_root}", f"output_dir={folder}",
                   *([f"cache_dir={args.cache}"] if args.cache else [])]
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
        command_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"the run at --parallel {parallel} failed ({done.returncode}): {done.stderr[-2000:]}")
        after = metrics(api_root)
    return measure(folder, parallel, threads, command_s, {k: after[k] - before[k] for k in COUNTERS})


def rows_text(rows: Sequence[Row]) -> Iterator[str]:
    yield (f"{'parallel':>8} {'threads':>7} {'tasks':>5} {'requests':>8} {'tasks/s':>8} {'phase s':>8} "
           f"{'command s':>9} {'model s':>8} {'busy s':>7} {'harness':>8} {'wrote tok/s':>11} {'decode':>7} "
           f"{'prompt':>7}  target <= {TARGET_SHARE:.0%}")
    for r in rows:
        yield (f"{r.parallel:>8} {r.threads:>7} {r.tasks:>5} {r.requests:>8} {r.tasks_per_s:>8.3f} {r.phase_s:>8.1f} "
               f"{r.command_s:>9.1f} {r.model_s:>8.1f} {r.busy_s:>7.1f} {r.harness_share:>8.1%} "
               f"{r.written / r.busy_s:>11.1f} {rate(r.counters, 'tokens_predicted'):>7.1f} "
               f"{rate(r.counters, 'prompt'):>7.1f}  {'met' if r.harness_share <= TARGET_SHARE else 'NOT met'}")
    yield ("wrote tok/s: the run's completion tokens over the server's busy time; decode and prompt: tokens/s of "
           "one request as the server timed them (/metrics)")


def ratio_lines(rows: Sequence[Row]) -> Iterator[str]:
    """Per thread count, tasks/s at each further --parallel over the first one's."""
    for threads in dict.fromkeys(r.threads for r in rows):
        same = [r for r in rows if r.threads == threads]
        for r in same[1:]:
            yield (f"tasks/s at --parallel {r.parallel} / at --parallel {same[0].parallel}, threads {threads}: "
                   f"{r.tasks_per_s / same[0].tasks_per_s:.2f}x")


def rate(counters: dict[str, float], kind: str) -> float:
    """Tokens per second of one request, `kind` `prompt` or `tokens_predicted`, from the `/metrics` counters."""
    seconds = counters[f"{kind}_seconds_total"]
    return counters[f"{kind}_total" if kind == "tokens_predicted" else "prompt_tokens_total"] / seconds \
        if seconds else 0.0


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--questions", type=int, default=8, help="demo questions per run (default 8)")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4], help="llama-server --parallel values")
    parser.add_argument("--threads", nargs="+", default=[AUTO],
                        help="llama-server --threads and --threads-batch, each run in turn; auto (the default): "
                             "llama.cpp's own choice")
    parser.add_argument("--cache", type=Path, default=None, help="the rollout cache (default: ROLLOUT_CACHE_DIR or "
                                                                  "~/.cache/rollout)")
    parser.add_argument("--smoke", action="store_true",
                        help="1 question at --parallel 1, on the first --threads, 2 turns of at most 24 tokens")
    args = parser.parse_args(argv)
    if args.smoke:
        args.questions, args.parallel, args.threads = 1, [1], args.threads[:1]
    if args.questions < 1 or any(p < 1 for p in args.parallel) or \
            any(t != AUTO and not (t.isdigit() and int(t) >= 1) for t in args.threads):
        print("error: --questions and --parallel take whole numbers of at least 1, --threads those or auto",
              file=sys.stderr)
        return 2
    try:
        binary = llama_server_binary(build=False)
    except LlamaMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = qwen("0.5b", args.cache)
    print(f"Qwen2.5-Coder-0.5B-Instruct ({MODELS['0.5b'].file}) on llama-server, {args.questions} demo questions, "
          f"threads {' and '.join(args.threads)}, {os.cpu_count()} cores; /proc/loadavg before: {loadavg()}",
          flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rollout-llm-speed-") as tmp:
        for parallel in args.parallel:
            for threads in args.threads:
                rows.append(one_run(parallel, threads, args, binary, model, Path(tmp)))
                print(f"  --parallel {parallel} --threads {threads}: {rows[-1].tasks_per_s:.3f} tasks/s", flush=True)
    for line in rows_text(rows):
        print(line)
    for line in ratio_lines(rows):
        print(line)
    print(f"/proc/loadavg after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
