"""`rollout COMMAND ...`: one command for runs, the gateway, reports, the viewer, training environments and retrieval
evaluation.

Each subcommand hands the rest of the command line to the module `python -m` runs, so both forms
behave alike. The rule for arguments: commands that compose `conf/` (run, eval-retrieval) take
Hydra `key=value` overrides (and Hydra's `-m`, `--help`, `--cfg job`, and `-v`/`-q` for `verbose=`);
commands that read files and folders (gateway, report, view) take positional paths and `--kebab-case`
options; `env` takes an experiment's `key=value` overrides beside its `--kebab-case` options, as
`export --questions` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from rollout.quick_start import run_command


def run_experiment(argv: list[str], prog: str | None = None) -> int:
    """`python -m rollout ARGS` (and `rollout run ARGS`): the run's Hydra app, unless ARGS start with another
    command's name, which Hydra would fail to read as an override (`subcommand_in`)."""
    if problem := subcommand_in(argv, prog):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from rollout.run.app import main

    return main(argv, prog=prog)


def _run(argv: list[str], prog: str) -> int | None:
    return run_experiment(argv, prog)


def _gateway(argv: list[str], prog: str) -> int | None:
    from rollout.gateway.cli import main

    return main(argv, prog=prog)


def _report(argv: list[str], prog: str) -> int | None:
    from rollout.report.cli import main

    return main(argv, prog=prog)


def _view(argv: list[str], prog: str) -> int | None:
    from rollout.view.cli import main

    return main(argv, prog=prog)


def _export(argv: list[str], prog: str) -> int | None:
    from rollout.export.cli import main

    return main(argv, prog=prog)


def _env(argv: list[str], prog: str) -> int | None:
    from rollout.trainers.openenv.__main__ import main

    return main(argv, prog=prog)


def _eval_retrieval(argv: list[str], prog: str) -> int | None:
    from rollout.retrieval.evaluate import main

    return main(argv, prog=prog)


def _build_index(argv: list[str], prog: str) -> int | None:
    from rollout.retrieval.build_index import main

    return main(argv, prog=prog)


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One `rollout NAME ...` and the `python -m` command it stands for."""

    name: str
    module: str
    """What `python -m` runs for it."""
    arguments: str
    """Usage after the name."""
    help: str
    hydra: bool
    """Takes Hydra overrides of conf/ (else argparse paths and --options)."""
    run: Callable[[list[str], str], int | None]
    """main(argv, prog) of the module; None means success."""


SUBCOMMANDS = {
    c.name: c
    for c in (
        Subcommand("run", "rollout", "[KEY=VALUE ...] [-m] [-v|-q]", "run an experiment (conf/config.yaml)", True,
                   _run),
        Subcommand("gateway", "rollout.gateway", "--config FILE [--port N ...] [-v|-q]",
                   "serve the MCP gateway on its own", False, _gateway),
        Subcommand("report", "rollout.report", "{tool-stats,compare,judge,rescore} PATH ...",
                   "tool-call statistics of run folders, runs compared side by side, answers scored by an LLM judge, "
                   "or runs scored again", False, _report),
        Subcommand("view", "rollout.view", "RUN [--task ID | --follow ...]",
                   "a run's tasks as a table, one task replayed, or a running run followed", False, _view),
        Subcommand("export", "rollout.export", "RUN --format F --out FILE ...",
                   "a run's conversations as SFT rows, or (--questions) a question set as verl RL prompts", False,
                   _export),
        Subcommand("env", "rollout.trainers.openenv", "[KEY=VALUE ...] [--gateway-url URL] [--port N ...]",
                   "serve an experiment as an OpenEnv environment for RL trainers (episodes over WebSocket)", False,
                   _env),
        Subcommand("eval-retrieval", "rollout.retrieval.evaluate", "[KEY=VALUE ...] [-m] [-v|-q]",
                   "recall@k, hit@k and MRR of each retriever, no agent (conf/retrieval_eval.yaml)", True,
                   _eval_retrieval),
        Subcommand("build-index", "rollout.retrieval.build_index", "[KEY=VALUE ...] [-v|-q]",
                   "build a corpus' dense and BM25 indexes on a Ray cluster into the run cache (conf/build_index.yaml)",
                   True, _build_index),
    )
}


_HYDRA_OPTIONS_WITH_VALUES = frozenset({"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
                                        "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"})
"""Hydra's options whose next argument is their value, not an override."""


def subcommand_in(args: Sequence[str], prog: str | None = None) -> str | None:
    """Why `args` cannot go to Hydra when their first word is a `rollout` subcommand (`python -m rollout gateway
    --help`, which Hydra would fail to parse as an override with a traceback); None when it is not one."""
    at = 0
    while at < len(args) and args[at].startswith("-"):
        at += 2 if args[at] in _HYDRA_OPTIONS_WITH_VALUES else 1
    command = SUBCOMMANDS.get(args[at]) if at < len(args) else None
    if command is None:
        return None
    rest = " ".join(args[at + 1:]) or "--help"
    here = prog or "python -m rollout"
    if command.name == "run":
        return f"{here} runs an experiment already and takes KEY=VALUE overrides: drop `run` ({here} {rest})"
    return (f"{command.name} is a command of its own, not an override of a run: use rollout {command.name} {rest} "
            f"(or python -m {command.module} {rest})")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: it only picks the subcommand; each subcommand parses its own arguments."""
    lines = [f"  rollout {c.name} {c.arguments}".ljust(58) + f"= python -m {c.module}" for c in SUBCOMMANDS.values()]
    parser = argparse.ArgumentParser(
        prog="rollout",
        description="One command for runs, the gateway, reports, the viewer and retrieval evaluation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join([
            "commands and their python -m equivalents:", *lines, "",
            "run and eval-retrieval take Hydra key=value overrides of conf/ (and -m, --help, --cfg job;",
            "-v/-q stand for verbose=N: -v debug lines, -vv libraries' too, -q warnings only);",
            "gateway, report and view take paths and --kebab-case options; env takes key=value overrides and",
            "--kebab-case options. `rollout COMMAND --help` for each.",
        ]),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for c in SUBCOMMANDS.values():
        commands.add_parser(c.name, help=c.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch `rollout COMMAND ARGS...` to COMMAND's module with ARGS; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args or args[0] not in SUBCOMMANDS:
        parser.parse_args(args[:1])  # prints help (--help) or the usage error naming the commands, and exits
    command = SUBCOMMANDS[args[0]]
    code = command.run(args[1:], f"rollout {command.name}")
    return 0 if code is None else code


def run() -> NoReturn:
    """The `rollout` console script: `main`, with fewer garbage collections while it imports, then the process ends
    without the interpreter's teardown (`rollout.quick_start.run_command`)."""
    run_command(main)


if __name__ == "__main__":
    run()
