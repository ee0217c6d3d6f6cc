"""A scripted training-like load on a real gateway, then `rollout report tool-stats DIR --by step` over its ledger.

    python bench/training_tool_use.py [--steps 20] [--rollouts 16] [--seed 0] [--passages 2000] [--out DIR]

Starts a gateway (`python -m rollout.gateway`, conf/gateways/rag_hybrid.json, the demo knowledge base, its ledger
in `--out`, a new temporary folder by default). For steps 1..N a simulated policy runs a batch of `--rollouts`
rollouts at once, each making 1 to 3 calls over MCP as a trainer's environment does (`HttpMCPRagEnv(...,
traffic="train")`, `env.call(..., step=k)`): dense or sparse, the chance of dense drifting from `--dense-from`
(0.8) to `--dense-to` (0.2) over the steps; its `top_k` drifting from 3 to 5 and its malformed calls (a `top_k`
that is not a number) from 10% to none, all drawn from one seeded generator. Each step also sends
`--retrieve-queries` queries to `POST /retrieve` with the `X-Rollout-Step` header, as a Search-R1-style client would
(0 leaves them out; a gateway that does not read the header records them without a step, and the report says so).
Then it runs the report and prints it: the shares it measured beside the mix the script drew from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from envs import HttpMCPRagEnv
from rollout.data import ensure_demo_kb, load_questions
from rollout.gateway_file import GATEWAYS_DIR
from rollout.paths import default_cache_dir
from rollout.run.gateway_process import GatewayProcess
from rollout.run_folder import calls_path
from rollout.wire import HEADER_STEP, HEADER_TRAFFIC, TRAFFIC_TRAIN, auth_headers, resolve_token

GATEWAY_FILE = GATEWAYS_DIR / "rag_hybrid.json"
DENSE, SPARSE = "query_knowledge_base_dense", "query_knowledge_base_sparse"


def drift(start: float, end: float, step: int, steps: int) -> float:
    """Linear from `start` at step 1 to `end` at the last step."""
    return start + (end - start) * (step - 1) / max(1, steps - 1)


async def rollout(env: HttpMCPRagEnv, rng: random.Random, questions: list[str], step: int, steps: int, n: int,
                  p_dense: float) -> None:
    """One rollout of step `step`: 1-3 calls, dense with probability `p_dense`."""
    top_k = 3 if rng.random() > drift(0.0, 1.0, step, steps) else 5
    malformed = drift(0.10, 0.0, step, steps)
    calls = []
    for _ in range(rng.randint(1, 3)):
        tool = DENSE if rng.random() < p_dense else SPARSE
        args: dict[str, object] = {"query": rng.choice(questions), "top_k": top_k}
        if rng.random() < malformed:
            args["top_k"] = "a few"
        calls.append((tool, args))
    for tool, args in calls:  # a rollout's calls are turns: one after another
        await env.call(tool, args, f"step{step}-rollout{n}", step=step)


async def drive(url: str, base: str, args: argparse.Namespace, questions: list[str]) -> list[float]:
    """Every step's batch; returns the chance of dense the script drew each step from."""
    rng = random.Random(args.seed)
    mix = []
    headers = auth_headers(resolve_token(None))
    async with HttpMCPRagEnv(url, GATEWAY_FILE, worker_id="trainer-0", traffic=TRAFFIC_TRAIN) as env, \
            httpx.AsyncClient(timeout=60, headers=headers) as http:
        for step in range(1, args.steps + 1):
            p_dense = drift(args.dense_from, args.dense_to, step, args.steps)
            mix.append(p_dense)
            # A step's rollouts run at once, as a trainer's batch does; their draws are made in order first.
            seeds = [rng.random() for _ in range(args.rollouts)]
            await asyncio.gather(*(rollout(env, random.Random(s), questions, step, args.steps, n, p_dense)
                                   for n, s in enumerate(seeds)))
            if args.retrieve_queries:
                r = await http.post(f"{base}/retrieve", json={"queries": rng.sample(questions, args.retrieve_queries),
                                                              "topk": 3},
                                    headers={HEADER_STEP: str(step), HEADER_TRAFFIC: TRAFFIC_TRAIN})
                r.raise_for_status()
    return mix


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rollouts", type=int, default=16, help="rollouts per step, run at once")
    p.add_argument("--dense-from", type=float, default=0.8)
    p.add_argument("--dense-to", type=float, default=0.2)
    p.add_argument("--retrieve-queries", type=int, default=2, help="queries sent to POST /retrieve per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="the gateway's --output-dir (default: a new temporary one)")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="training-tool-use-"))
    if calls_path(out).exists():
        raise SystemExit(f"{calls_path(out)} exists: pass an --out folder without a ledger, so only this load counts")
    cache_dir = args.cache_dir or default_cache_dir()
    questions = [q.question for q in load_questions(ensure_demo_kb(cache_dir, n_passages=args.passages).questions_path)]
    gateway = ["--config", str(GATEWAY_FILE), "--demo-passages", str(args.passages), "--cache-dir", str(cache_dir),
               "--output-dir", str(out), "--no-report", "-q"]
    with GatewayProcess(gateway) as gw:
        url = gw.wait_ready()
        t0 = time.perf_counter()
        mix = asyncio.run(drive(url, url.removesuffix("/mcp"), args, questions))
        elapsed = time.perf_counter() - t0
    lines = [json.loads(line) for line in calls_path(out).read_text(encoding="utf-8").splitlines() if line.strip()]
    retrieve = [line for line in lines if line.get("via") == "retrieve"]
    print(f"{len(lines)} calls in {elapsed:.1f} s over {args.steps} steps of {args.rollouts} rollouts "
          f"(seed {args.seed}); ledger {calls_path(out)}")
    print("scripted chance of dense per step: " + " ".join(f"{p:.2f}" for p in mix))
    if retrieve and not any("step" in line for line in retrieve):
        print(f"this gateway records /retrieve queries without {HEADER_STEP}: the report counts those "
              f"{len(retrieve)} apart")
    sys.stdout.flush()
    report = [sys.executable, "-m", "rollout.report", "tool-stats", str(out), "--by", "step"]
    print("$ " + " ".join(["rollout", "report", *report[3:]]), flush=True)
    return subprocess.run(report, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
