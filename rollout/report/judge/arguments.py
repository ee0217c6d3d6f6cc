"""The options of `rollout report judge RUN ...`, read before the judge's modules load (its LLM client is most of the
report command's start-up); `rollout.report.judge.command` runs them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from rollout.report.judge.presets import PRESETS

SHOWN_DISAGREEMENTS = 5
"""Tasks listed per off-diagonal cell unless --disagreements asks for all."""
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def add_judge_parser(commands: Any, run: Callable[[argparse.Namespace, Console], int]) -> argparse.ArgumentParser:
    """`judge [options]` on the report command's subparsers, run by `run` (`rollout.report.judge.command.run_judge`);
    the caller adds the run folders it reads, as every report command does."""
    judge = commands.add_parser(
        "judge",
        help="score each run's answers with an LLM judge on a published grader prompt (without rerunning the "
             "agent); writes judgements/<judge-key>.jsonl and scores/judge.jsonl",
    )
    judge.add_argument("--model", help="the judge model its endpoint serves (default: the run's judge.model)")
    judge.add_argument("--base-url", help=f"the judge's OpenAI-compatible endpoint (default: the run's judge.base_url, "
                                          f"else {DEFAULT_BASE_URL})")
    judge.add_argument("--preset", choices=sorted(PRESETS), help="the grader prompt (default: simpleqa)")
    judge.add_argument("--concurrency", type=int, help="requests in flight at once (default: 16)")
    judge.add_argument("--api-key-env", help="environment variable holding the key (default: OPENAI_API_KEY)")
    judge.add_argument("--temperature", type=float, help="sampling temperature (default: 0.0)")
    judge.add_argument("--max-tokens", type=int, help="token limit of a reply (default: 2048)")
    judge.add_argument("--timeout-s", type=float, help="per request (default: 120)")
    judge.add_argument("--max-retries", type=int, help="on 429, 5xx and connection errors (default: 5)")
    judge.add_argument("--price-prompt", type=float, help="USD per million prompt tokens of the judge")
    judge.add_argument("--price-completion", type=float, help="USD per million completion tokens of the judge")
    judge.add_argument("--disagreements", action="store_true",
                       help=f"list every task exact match and the judge disagree on (default: the first "
                            f"{SHOWN_DISAGREEMENTS} of each kind)")
    judge.set_defaults(run=run)
    return judge
