"""How close judging comes to the judge's own pace: tasks per second against concurrency / latency.

A scripted judge (tests/report/judge_server.py) answers every request after a fixed delay, in its own process so it
does not share the judging process's core. With `concurrency` requests in flight and each taking `delay` seconds,
no client can judge more than concurrency / delay tasks a second; the ratio shows what the client itself (the
openai SDK, httpx, parsing, writing verdicts) costs on top. It also prints the judging process's CPU per verdict
and the share of a core it got: on a machine busy with other work the rate follows that share.

    python bench/judge.py --tasks 10000 --delay-s 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rollout.records import TaskResult
from rollout.report.judge.command import judge_run
from rollout.report.judge.grader import DEFAULT_CONCURRENCY, JudgeSettings
from rollout.run_folder import TRAJECTORY_FILE


def make_run(root: Path, n: int) -> Path:
    lines = (json.dumps(TaskResult(id=f"q{i:06d}", question=f"Who wrote book {i}?", golden_answers=[f"Author {i}"],
                                   prediction=f"Author {i}" if i % 3 else "someone else", tool_calls=[], turns=1,
                                   error=None, worker_id="w0", latency_s=1.0).to_json()) + "\n" for i in range(n))
    (root / TRAJECTORY_FILE).write_text("".join(lines), encoding="utf-8")
    return root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--delay-s", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    args = p.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "tests.report.judge_server", "--delay-s", str(args.delay_s)],
                              stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            run = make_run(Path(tmp), args.tasks)
            settings = JudgeSettings.from_config({"base_url": base_url, "model": "bench-judge",
                                                  "concurrency": args.concurrency, "max_retries": 0})
            t0, cpu0 = time.perf_counter(), time.process_time()
            judging = judge_run(run, settings)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert judging.asked == args.tasks and judging.request_errors == 0, judging
    rate, ideal = args.tasks / wall, args.concurrency / args.delay_s
    print(f"load average {os.getloadavg()[0]:.1f}; {args.tasks} answers, judge delay {args.delay_s * 1000:.0f} ms, "
          f"concurrency {args.concurrency}")
    print(f"judged {rate:.0f} tasks/s in {wall:.1f} s (reading, judging, writing); ideal {ideal:.0f} tasks/s; "
          f"ratio {rate / ideal:.2f}")
    per_verdict = cpu / args.tasks
    print(f"the judging process used {per_verdict * 1000:.2f} ms of CPU per verdict: on a core of its own it could "
          f"judge {1 / per_verdict:.0f} a second (ratio {min(1 / per_verdict, ideal) / ideal:.2f} of the ideal); it "
          f"got {cpu / wall:.2f} of a core")


if __name__ == "__main__":
    main()
