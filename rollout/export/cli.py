"""`rollout export` (also `python -m rollout.export`): a run's conversations as SFT rows, a question set as
verl RL prompts, or a run as BrowseComp-Plus run files.

    rollout export RUN --format openai|trl|verl-sft --out FILE.jsonl|FILE.parquet [--only-correct | --min-f1 X]
    rollout export --questions [KEY=VALUE ...] --format verl-rl --out FILE.parquet [--data-source NAME]
    rollout export RUN --format browsecomp-plus --out DIR

One row per task (a question's repeat) that ended `ok`; the filters keep the exact-match-correct ones, or those
with F1 at least X, scored as the run's summary scores them. It prints one line: the rows written and the tasks
skipped, by reason. Bad arguments print one line to stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rollout.errors import ExportError, RolloutError
from rollout.export.browsecomp_run import check_out_dir, export_browsecomp_plus
from rollout.export.formats import FORMATS, RL_FORMATS, RUN_FORMATS, SFT_ROWS
from rollout.export.questions import compose_questions, prompt_rows
from rollout.export.trajectories import RunConversations, TaskFilter
from rollout.export.writers import check_suffix, row_file


def build_parser(prog: str = "python -m rollout.export") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a run's conversations as SFT rows (openai, trl, verl-sft), a question set as verl RL "
                    "prompts (verl-rl), or a run as a folder of BrowseComp-Plus run files for its evaluator "
                    "(browsecomp-plus). The --out suffix picks the file type: .jsonl or .parquet.",
    )
    parser.add_argument("run", nargs="?", metavar="RUN", help="run folder (holding trajectory.jsonl and tools.json)")
    parser.add_argument("--questions", nargs="*", metavar="KEY=VALUE",
                        help="instead of RUN, for --format verl-rl: the question set a run with these Hydra "
                             "overrides would ask (none: the demo dataset), e.g. dataset=nq dataset.questions.path=F")
    parser.add_argument("--format", required=True, choices=FORMATS, help="row format")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE",
                        help="output file: .jsonl or .parquet (browsecomp-plus: a folder)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--only-correct", action="store_true", help="only tasks whose answer is exact-match correct")
    keep.add_argument("--min-f1", type=float, metavar="X", help="only tasks whose answer has token F1 of at least X")
    parser.add_argument("--data-source", metavar="NAME",
                        help="verl-rl: the rows' data_source, by which verl picks its reward (default: dataset.name)")
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """The combinations argparse cannot check; an ExportError names the one to fix."""
    from_questions = args.questions is not None
    if (args.run is None) == (not from_questions):
        raise ExportError("pass a run folder (RUN) or --questions [KEY=VALUE ...], one of the two")
    if args.format in RL_FORMATS and not from_questions:
        raise ExportError(f"--format {args.format} writes prompts from a question set: use --questions [KEY=VALUE ...] "
                          "instead of a run folder")
    if args.format not in RL_FORMATS and from_questions:
        raise ExportError(f"--format {args.format} writes a run's conversations: pass the run folder instead of "
                          "--questions (which goes with --format verl-rl)")
    if from_questions and (args.only_correct or args.min_f1 is not None):
        raise ExportError("--only-correct and --min-f1 choose among a run's tasks: they do not go with --questions")
    if args.data_source is not None and not from_questions:
        raise ExportError("--data-source names the dataset of verl-rl prompts: it goes with --questions")
    if args.min_f1 is not None and not 0.0 <= args.min_f1 <= 1.0:
        raise ExportError(f"--min-f1 {args.min_f1:g}: F1 is between 0 and 1")
    if args.format in RUN_FORMATS:
        if args.only_correct or args.min_f1 is not None:
            raise ExportError(f"--format {args.format} writes every query, as its leaderboard counts every one: "
                              "leave out --only-correct and --min-f1")
        check_out_dir(args.out)
        return
    if args.out.is_dir():
        raise ExportError(f"--out {args.out} is a folder: name a file ending in .jsonl or .parquet")
    check_suffix(args.out)


def export_run(args: argparse.Namespace) -> str:
    """Write the run's conversations; the line to print."""
    conversations = RunConversations(args.run, TaskFilter(args.only_correct, args.min_f1))
    to_row = SFT_ROWS[args.format]
    written = 0
    with row_file(args.out, args.format, conversations.tools.specs if conversations.tools else None) as out:
        for conversation in conversations:
            out.write(to_row(conversation))
            written += 1
    return f"wrote {_rows(written)} to {args.out} ({args.format}); {_skipped(conversations.skipped)}"


def export_questions(args: argparse.Namespace) -> str:
    """Write the question set's prompts; the line to print."""
    cfg = compose_questions(args.questions)
    written = 0
    with row_file(args.out, args.format) as out:
        for row in prompt_rows(cfg, args.data_source):
            out.write(row.to_json())
            written += 1
    return f"wrote {_rows(written)} to {args.out} ({args.format}, dataset {cfg.dataset.name})"


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


def _skipped(skipped: Counter[str]) -> str:
    if not skipped:
        return "skipped no task"
    reasons = ", ".join(f"{n:,} {why}" for why, n in sorted(skipped.items(), key=lambda r: (-r[1], r[0].lower())))
    total = sum(skipped.values())
    return f"skipped {total:,} task{'' if total == 1 else 's'}: {reasons}"


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m rollout.export") -> int:
    """Export as asked; bad arguments or an unusable run folder print one line to stderr and return 2."""
    args = build_parser(prog).parse_args(argv)
    try:
        check_arguments(args)
        if args.questions is not None:
            line = export_questions(args)
        elif args.format in RUN_FORMATS:
            line = export_browsecomp_plus(args.run, args.out).line()
        else:
            line = export_run(args)
    except (RolloutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(line)
    return 0
