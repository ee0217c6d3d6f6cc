"""What the tagged agent (agent=search_r1) costs in CPU per turn, beside the model and the tools.

Each turn it restores a dropped closing tag and parses the reply, formats the search's passages into the
information block, and builds the next request: on the completions path the prompt (the chat template's
rendering of the instruction, then the whole text so far), on the chat path the two messages. This times those
pure functions (`time.process_time`, no network) on a Search-R1-shaped conversation of about 4k tokens (counted
with the bundled tokenizer), for both wire paths:

    python bench/tagged_agent.py --iterations 2000

The target is under 2 ms a turn. The chat template is rendered once per task, not per turn; its row is shown
apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from hydra.utils import instantiate

from rollout.agents.tagged import TaggedAgent
from rollout.llm.chat_client import Completion
from rollout.llm.token_count import load_token_counter
from rollout.records import ToolResult
from rollout.run.config import compose_run_config

CHATML = Path(__file__).resolve().parents[1] / "tests" / "agents" / "data" / "chatml"
QUESTION = "Which city was the founder of the company with registry code ORG-5521 born in?"
TURNS = 8


def _passages(turn: int) -> ToolResult:
    """Three 100-word passages, as the gateway's query tools return them."""
    words = ("Veltrix Holdings makes textile looms in the river town of Kelmor and sells them across Dravia; "
             "its founder Arlen Voss was born there in 1961 and studied engineering before ").split()
    hits = [{"id": f"d{turn}{k}", "title": f"Passage {turn}.{k}", "text": " ".join((words * 4)[:100])}
            for k in range(3)]
    return ToolResult(True, "", {"query": "q", "retriever": "sparse", "results": hits})


def _reply(turn: int) -> Completion:
    thought = " ".join(["The passages name the company and its founder, so I search the next hop."] * 4)
    text = f"<think>{thought}</think>\n<search> founder of Veltrix Holdings step {turn} "
    return Completion(text, None, [], "stop", None, 0.0, 1, stop="</search>", names_stop=True)


def _conversation(agent: TaggedAgent) -> list[str]:
    """The contents after the instruction after TURNS turns (searches and their results), about 4k tokens."""
    parts = []
    for turn in range(TURNS):
        parts.append(agent.step(_reply(turn)).text)
        parts.append(agent.protocol.observation(_passages(turn)))
    return parts


def _cpu_us(fn: Callable[[], object], iterations: int, rounds: int) -> float:
    """Median over rounds of the CPU time of one call, in µs."""
    per_round = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(iterations):
            fn()
        per_round.append((time.process_time() - t0) / iterations * 1e6)
    return statistics.median(per_round)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    base = ("agent=search_r1", "llm.model=bench", "llm.base_url=http://127.0.0.1:9/v1")
    agents: dict[str, TaggedAgent] = {
        "chat": instantiate(compose_run_config(*base).agent),
        "completions": instantiate(compose_run_config(*base, "agent.wire=completions",
                                                      f"agent.chat_template={CHATML}").agent),
    }
    counter = load_token_counter(None)
    instruction = agents["chat"].protocol.instruction(question=QUESTION)
    parts = _conversation(agents["chat"])
    text = "".join(parts)
    head = agents["completions"].prompt_head(instruction)
    print(f"load average {os.getloadavg()[0]:.1f}; conversation of {counter.count(instruction + text):,} tokens "
          f"({len(instruction + text):,} characters, {TURNS} searches); {args.iterations} iterations x "
          f"{args.rounds} rounds, median, CPU time")
    print(f"| {'wire':11} | parse µs | format µs | request µs | turn µs | template once µs |")
    print(f"|{'-' * 13}|----------|-----------|------------|---------|------------------|")
    for wire, agent in agents.items():
        print(_row(wire, agent, instruction, parts, head if wire == "completions" else None, args))


def _row(wire: str, agent: TaggedAgent, instruction: str, parts: list[str], head: str | None,
         args: argparse.Namespace) -> str:
    reply, result = _reply(TURNS), _passages(TURNS)
    parse = _cpu_us(lambda: agent.step(reply), args.iterations, args.rounds)
    fmt = _cpu_us(lambda: agent.protocol.observation(result), args.iterations, args.rounds)
    request = _cpu_us(lambda: agent.request(instruction, head, parts), args.iterations, args.rounds)
    once = 0.0 if head is None else _cpu_us(lambda: agent.prompt_head(instruction), max(1, args.iterations // 10),
                                            args.rounds)
    return (f"| {wire:11} | {parse:8.1f} | {fmt:9.1f} | {request:10.1f} | {parse + fmt + request:7.1f} "
            f"| {once:16.1f} |")


if __name__ == "__main__":
    main()
