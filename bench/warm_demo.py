"""The warm demo against Ray's own start and stop, side by side in one call.

    python bench/warm_demo.py [--rounds 3] [--baseline DIR]

Each round runs, in turn, each in a fresh process with a warm cache (the demo's indexes built once before the
first round):
- Ray alone: `import ray; ray.init(...); ray.shutdown()` with the arguments a run starts its local Ray with
  (`rollout.run.ray_session.ray_settings`). Its start is when `ray.init` has returned (the process says so on
  stdout), its whole time when the process has exited. The targets are measured against it.
- Ray alone as a run starts it: the same, as a run starts its own Ray (`rollout.run.ray_start`: without two head
  processes, without a one-second wait): what is left of the demo's time beyond it is rollout's own.
- the demo: `python -m rollout mode=hybrid progress=false` into a new folder. Its summary is on screen when the
  summary table's first line reaches stdout; its whole time when the process has exited. The run's own timeline
  (its log's `Timeline` line) says where the seconds inside go.
- with `--baseline DIR`, the demo of another checkout (a clone of an older commit), with `PYTHONPATH=DIR`, for a
  before/after ratio measured in the same call.
- Ray beside a loading gateway: Ray as a run starts it, in a process that first launches the demo's gateway (its
  command line as a run builds it), as every run does. On a machine of few cores the gateway's start (imports, indexes,
  encoder) takes CPU from Ray's own processes: this is how fast Ray comes up in any run that loads its gateway while
  Ray starts, and how much of the demo's excess over Ray alone that contention accounts for here.

It prints the medians, the run's timeline of the median demo, what comes after the summary (Ray's shutdown, the
gateway's stop, the tool report, the interpreter's exit), the CPU seconds each takes (all its processes: the
demo's work beyond Ray's, spread over every core, is the least it can add to Ray's time on this machine), and the
targets:
  whole demo <= Ray's start and stop + 5 s;  summary on screen <= Ray's start + 4 s.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rollout.paths import PROJECT_ROOT

SUMMARY_HEAD = re.compile(r"^rollout · mode=")
TIMELINE = re.compile(r"Timeline \(seconds since start\): (.*)$")
RAY_INIT = 'ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)'
"""The `ray.init` a run makes for its own Ray (`rollout.run.ray_session.ray_settings`), written out so that Ray alone
imports nothing of rollout's."""
RAY_ONLY = f"""
import logging
import ray
{RAY_INIT}
print("ray up", flush=True)
ray.shutdown()
"""
"""Ray alone, started as a bare `ray.init` with a run's arguments."""
RAY_AS_A_RUN_STARTS_IT = RAY_ONLY.replace(
    RAY_INIT, f"from rollout.run.ray_start import lean_start\nwith lean_start():\n    {RAY_INIT}")
"""`RAY_ONLY` as a run starts its own Ray (`rollout.run.ray_start` imports nothing but Ray's)."""


@dataclass(frozen=True)
class Timing:
    first_mark: float
    """Seconds from the process's start to the marker line (Ray up; the demo's summary)."""
    whole: float
    """Seconds from the process's start to its exit."""
    timeline: str = ""
    cpu: float = 0.0
    """CPU seconds (user + system) of the process and every process under it that was waited for: Ray's, the
    gateway's, the workers'."""


def timed(argv: list[str], marker: re.Pattern[str], env: dict[str, str], cwd: Path) -> Timing:
    """Run `argv`, timing the first stdout line matching `marker` and the exit; the run's timeline from stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    seen: list[float] = []
    timeline: list[str] = []
    stderr_lines: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line)
            if m := TIMELINE.search(line):
                timeline.append(m.group(1))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        if not seen and marker.search(line):
            seen.append(time.perf_counter() - start)
    proc.wait()
    whole = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reader.join()
    if proc.returncode != 0 or not seen:
        sys.exit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{''.join(stderr_lines[-20:])}")
    return Timing(seen[0], whole, timeline[0] if timeline else "", cpu)


def demo(python_path: Path, out_root: Path, n: int) -> Timing:
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    out = out_root / f"demo-{python_path.name}-{n}"
    return timed([sys.executable, "-m", "rollout", "mode=hybrid", "progress=false", f"output_dir={out}"],
                 SUMMARY_HEAD, env, python_path)


def ray_alone(script: str) -> Timing:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return timed([sys.executable, "-c", script], re.compile(r"^ray up"), env, PROJECT_ROOT)


RAY_BESIDE_GATEWAY = """
import subprocess, sys
gateway = subprocess.Popen([sys.executable, "-m", "rollout.gateway", *sys.argv[1:], "--port", "0", "-q"])
""" + RAY_AS_A_RUN_STARTS_IT + """
gateway.terminate()
gateway.wait()
"""
"""`RAY_AS_A_RUN_STARTS_IT` with the demo's gateway launched first (its arguments follow the script), as a run launches
it."""


def demo_gateway_args(work: Path) -> list[str]:
    """The demo's gateway command line, as `python -m rollout mode=hybrid` builds it (its data already made)."""
    import json

    from rollout.data.dataset import prepare_data
    from rollout.run.config import compose_run_config
    from rollout.run.gateway_kinds import gateway_args

    cfg = compose_run_config("mode=hybrid", f"output_dir={work / 'beside'}")
    retriever = work / "retriever.json"
    retriever.write_text(json.dumps(cfg.retriever.to_dict()), encoding="utf-8")
    return gateway_args(cfg.gateway_launch, prepare_data(cfg.dataset, cfg.cache_dir).corpus_path, retriever)


def ray_beside_gateway(args: list[str]) -> Timing:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return timed([sys.executable, "-c", RAY_BESIDE_GATEWAY, *args], re.compile(r"^ray up"), env, PROJECT_ROOT)


def median(timings: list[Timing], attr: str) -> float:
    return statistics.median(getattr(t, attr) for t in timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit, run in turn with this one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warm-demo-") as tmp:
        out_root = Path(tmp)
        print("warming the cache (one demo run, not timed)")
        demo(PROJECT_ROOT, out_root, -1)
        gateway = demo_gateway_args(out_root)
        rays: list[Timing] = []
        leans: list[Timing] = []
        besides: list[Timing] = []
        demos: list[Timing] = []
        baselines: list[Timing] = []
        for n in range(args.rounds):
            rays.append(ray_alone(RAY_ONLY))
            leans.append(ray_alone(RAY_AS_A_RUN_STARTS_IT))
            besides.append(ray_beside_gateway(gateway))
            demos.append(demo(PROJECT_ROOT, out_root, n))
            if args.baseline:
                baselines.append(demo(args.baseline.resolve(), out_root, n))
            line = f"round {n + 1}: Ray start {rays[-1].first_mark:.2f} s, start+stop {rays[-1].whole:.2f} s · " \
                   f"as a run starts it {leans[-1].first_mark:.2f} s, beside a loading gateway " \
                   f"{besides[-1].first_mark:.2f} s · " \
                   f"demo summary {demos[-1].first_mark:.2f} s, whole {demos[-1].whole:.2f} s"
            if baselines:
                line += f" · baseline summary {baselines[-1].first_mark:.2f} s, whole {baselines[-1].whole:.2f} s"
            print(line, flush=True)
    ray_start, ray_whole = median(rays, "first_mark"), median(rays, "whole")
    summary, whole = median(demos, "first_mark"), median(demos, "whole")
    typical = sorted(demos, key=lambda t: t.whole)[len(demos) // 2]
    print(f"\nmedians of {args.rounds} rounds")
    print(f"  Ray alone: start {ray_start:.2f} s, start and stop {ray_whole:.2f} s")
    lean_start, lean_whole = median(leans, "first_mark"), median(leans, "whole")
    print(f"  Ray alone as a run starts it: start {lean_start:.2f} s, start and stop {lean_whole:.2f} s")
    beside = median(besides, "first_mark")
    print(f"  that Ray beside a loading gateway: start {beside:.2f} s, {beside - lean_start:+.2f} s on it alone: this "
          f"machine's share of the run's time beyond Ray's start")
    print(f"  demo: summary on screen {summary:.2f} s, whole process {whole:.2f} s")
    print(f"  the median demo's timeline (s since the run started): {typical.timeline}")
    print(f"  after the summary (Ray's shutdown, the gateway's stop, the tool report, exit): "
          f"{typical.whole - typical.first_mark:.2f} s")
    if baselines:
        b_summary, b_whole = median(baselines, "first_mark"), median(baselines, "whole")
        print(f"  baseline ({args.baseline}): summary {b_summary:.2f} s, whole {b_whole:.2f} s; "
              f"ratio baseline/this: summary {b_summary / summary:.2f}, whole {b_whole / whole:.2f}")
    cores = os.cpu_count() or 1
    extra_cpu = median(demos, "cpu") - median(leans, "cpu")
    floor = lean_whole + extra_cpu / cores
    print(f"  CPU seconds (all processes): Ray as a run starts it {median(leans, 'cpu'):.2f}, demo "
          f"{median(demos, 'cpu'):.2f}; the demo's work beyond Ray's, {extra_cpu:.2f} CPU-s, takes at least "
          f"{extra_cpu / cores:.2f} s on {cores} cores: the whole demo cannot end before {floor:.2f} s here (that "
          f"Ray's start and stop + that)")
    ok_whole = whole <= ray_whole + 5
    ok_summary = summary <= ray_start + 4
    print(f"\ntarget whole <= Ray start+stop + 5 s: {whole:.2f} <= {ray_whole + 5:.2f} -> "
          f"{'met' if ok_whole else 'NOT met'} (excess over Ray: {whole - ray_whole:.2f} s)")
    print(f"target summary <= Ray start + 4 s: {summary:.2f} <= {ray_start + 4:.2f} -> "
          f"{'met' if ok_summary else 'NOT met'} (excess over Ray's start: {summary - ray_start:.2f} s)")
    print(f"rollout's own time beyond Ray as a run starts it: summary {summary - lean_start:.2f} s over its start "
          f"({summary - beside:.2f} s over its start beside a loading gateway), whole {whole - lean_whole:.2f} s over "
          f"its start and stop")


if __name__ == "__main__":
    main()
