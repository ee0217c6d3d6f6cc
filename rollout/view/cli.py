"""`python -m rollout.view PATH [--task ID]` (also `rollout view`): look at a run's trajectory in the terminal.

Without `--task` it prints a table of the tasks; with it, it replays one task event by event;
with `--follow` it tails a running run and prints a line per task as it finishes. Rendering
lives in `rollout.view.render`; this module reads the file and handles the command line.

A trajectory can hold 10,000+ tasks with long lines (messages, tool results, events), so the
file is streamed: the table keeps a few fields per task, and `--task` fully parses only the
lines that can be the task asked for.
"""

from __future__ import annotations

import argparse
import difflib
import heapq
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, get_args

from rich.console import Console
from rich.text import Text

from rollout.console import ReadableConsole
from rollout.errors import ReportError, ViewError
from rollout.records import TaskResult, TaskStatus
from rollout.run_folder import TRAJECTORY_FILE
from rollout.view.render import format_live_event, render_task
from rollout.view.task_table import TaskRow, Totals, format_task_line, render_table

__all__ = ["format_live_event", "main", "render_task"]

STATUSES: tuple[str, ...] = get_args(TaskStatus)
TOKEN_ENV = "ROLLOUT_VIEW_TOKEN"
"""Where `--serve` reads its token when `--token` is not given."""
LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""Addresses `--serve` binds to without a token."""
POLL_S = 0.5
"""How often `--follow` looks for new lines."""

# The driver writes `json.dumps(TaskResult.to_json())`, so every line starts with the id: reading
# just that lets `--task` skip the full parse of every other line.
_ID_PREFIX = re.compile(rb'\{"id": ("(?:[^"\\]|\\.)*"),')


def trajectory_path(path: Path) -> Path:
    """The trajectory.jsonl of a run folder, or the file itself."""
    if path.is_dir():
        file = path / TRAJECTORY_FILE
        if not file.is_file():
            raise ViewError(f"{path}: no {TRAJECTORY_FILE} here; pass a run folder such as results/<experiment>/<mode>")
        return file
    if not path.exists():
        raise ViewError(f"{path}: no such file or folder")
    return path


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    """One trajectory line as a dict; anything else is a ViewError naming file:line."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ViewError(f"{where}: not a JSON line ({e.msg} at column {e.colno})") from None
    except ValueError as e:  # bytes that are not UTF-8
        raise ViewError(f"{where}: not a JSON line ({e})") from None
    if not isinstance(data, dict) or "id" not in data:
        raise ViewError(f"{where}: not a task record (a JSON object with an 'id')")
    return data


def _lines(file: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-blank complete line.

    A last line without its newline is a task the driver is still writing (the run is live):
    it is left out rather than reported as malformed.
    """
    with file.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if raw.endswith(b"\n") and raw.strip():
                yield lineno, raw


def iter_tasks(file: Path) -> Iterator[dict[str, Any]]:
    """Each task of the file as a dict, in file order."""
    for lineno, raw in _lines(file):
        yield parse_line(raw, f"{file}:{lineno}")


def _line_id(raw: bytes) -> str | None:
    m = _ID_PREFIX.match(raw)
    return json.loads(m.group(1)) if m else None


def find_task(file: Path, task_id: str) -> TaskResult:
    """The task with this id (its last record, should a resumed run have written it twice)."""
    found: tuple[int, bytes] | None = None
    ids: list[str] = []
    for lineno, raw in _lines(file):
        line_id = _line_id(raw)
        if line_id is None:  # not in the driver's key order: read it whole
            line_id = str(parse_line(raw, f"{file}:{lineno}")["id"])
        ids.append(line_id)
        if line_id == task_id:
            found = (lineno, raw)
    if found is None:
        raise ViewError(_unknown_id(file, task_id, ids))
    lineno, raw = found
    data = parse_line(raw, f"{file}:{lineno}")
    try:
        return TaskResult.from_json(data)
    except (TypeError, ValueError) as e:  # a field missing, or an event of a type this version does not know
        raise ViewError(f"{file}:{lineno}: not a task record ({e})") from None


def _unknown_id(file: Path, task_id: str, ids: list[str]) -> str:
    if not ids:
        return f"no task {task_id!r} in {file}: it holds no tasks yet"
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.6)
    hint = f"; close: {', '.join(close)}" if close else ""
    sample = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
    return f"no task {task_id!r} in {file} ({len(ids):,} tasks{hint}; ids include: {sample})"


def _matcher(args: argparse.Namespace) -> Callable[[TaskRow], bool]:
    def matches(row: TaskRow) -> bool:
        return (args.status is None or row.status == args.status) and (not args.wrong or row.em == 0)

    return matches


def _filters(args: argparse.Namespace) -> str:
    parts = [f"--status {args.status}"] if args.status else []
    parts += ["--wrong"] if args.wrong else []
    parts.append(f"--limit {args.limit}")
    return f" ({' '.join(parts)})"


def show_table(file: Path, args: argparse.Namespace, console: Console) -> int:
    """Stream the file into the table: totals over all tasks, rows for the first `--limit` matches in question
    order (`TaskRow.order`; the file holds them in the order they finished)."""
    matches = _matcher(args)
    totals, matched = Totals(), 0

    def matching() -> Iterator[TaskRow]:
        nonlocal matched
        for data in iter_tasks(file):
            row = TaskRow.from_json(data)
            totals.add(row)
            if matches(row):
                matched += 1
                yield row

    rows = heapq.nsmallest(args.limit, matching(), key=lambda r: r.order)  # keeps `--limit` rows, not the file
    console.print(Text(str(file), style="dim"))
    render_table(console, rows, totals, matched, _filters(args))
    return 0


def _wait_for(file: Path, folder: Path | None, sleep: Callable[[float], None], stop: Callable[[], bool]) -> bool:
    """Wait for a starting run to create its trajectory; False when stopped first."""
    while not file.is_file():
        if folder is None or not folder.is_dir():
            raise ViewError(f"{file}: no such file or folder")
        if stop():
            return False
        sleep(POLL_S)
    return True


def follow(
    file: Path,
    args: argparse.Namespace,
    console: Console,
    *,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Tail a running run: totals so far, then one line per task as it finishes, until Ctrl-C.

    Lines are read as the driver appends them; a half-written line waits for its end. A run that
    starts over in the same folder truncates the file: following restarts from its beginning.
    A malformed line is reported and skipped so a live view does not end on it.
    """
    matches = _matcher(args)
    totals = Totals()
    f: BinaryIO | None = None
    try:
        if not _wait_for(file, file.parent if file.name == TRAJECTORY_FILE else None, sleep, stop):
            return 0
        f = file.open("rb")
        lineno, pending, caught_up = 0, b"", False
        while not stop():
            chunk = f.readline()
            if not chunk:  # at the end of what the driver has written so far
                if not caught_up:
                    console.print(Text(f"following {file} (Ctrl-C stops); finished so far:", style="dim"))
                    console.print(totals.line())
                    caught_up = True
                if os.stat(file).st_size < f.tell():
                    console.print(Text(f"{file} was truncated (the run started over): following from its start", style="yellow"))
                    f.seek(0)
                    totals, lineno, pending = Totals(), 0, b""
                    continue
                sleep(POLL_S)
                continue
            pending += chunk
            if not pending.endswith(b"\n"):
                continue
            raw, pending = pending, b""
            lineno += 1
            if not raw.strip():
                continue
            try:
                row = TaskRow.from_json(parse_line(raw, f"{file}:{lineno}"))
            except ViewError as e:
                console.print(Text(f"skipped {e}", style="red"))
                continue
            totals.add(row)
            if caught_up and matches(row):
                console.print(format_task_line(row))
    except KeyboardInterrupt:
        pass
    finally:
        if f is not None:
            f.close()
    console.print(totals.line())
    return 0


def show_task(file: Path, args: argparse.Namespace, console: Console) -> int:
    render_task(console, find_task(file, args.task), full=args.full)
    return 0


def build_parser(prog: str = "python -m rollout.view") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Show a run's tasks as a table, replay one task's events, follow a running run, "
                    "or open runs in the browser (--serve, --html).",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run folder (holding trajectory.jsonl) or a trajectory.jsonl file; with --serve or --html, "
                             "several runs or a sweep's folder")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--task", metavar="ID", help="replay this task event by event")
    what.add_argument("--follow", action="store_true", help="print a line per task as a running run finishes it (Ctrl-C stops)")
    what.add_argument("--serve", action="store_true", help="serve the runs as web pages (see docs/viewer.md)")
    what.add_argument("--html", metavar="FILE", help="write the runs' pages into one self-contained HTML file")
    parser.add_argument("--full", action="store_true", help="with --task: show long texts whole instead of cut")
    parser.add_argument("--limit", type=int, metavar="N", help="table: at most N rows (default 50)")
    parser.add_argument("--status", choices=STATUSES, help="table and --follow: only tasks with this status")
    parser.add_argument("--wrong", action="store_true", help="table and --follow: only tasks with exact match 0")
    parser.add_argument("--host", default="127.0.0.1", help="--serve: address to bind (default 127.0.0.1; any "
                        f"other needs a token: --token or {TOKEN_ENV})")
    parser.add_argument("--port", type=int, default=8765, help="--serve: port (default 8765; 0 picks a free one)")
    parser.add_argument("--token", help=f"--serve: the token a browser must present (default ${TOKEN_ENV})")
    return parser


def _refuse_terminal_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Options that only mean something in the terminal or only in the browser are refused where they would be ignored."""
    web = args.serve or args.html is not None
    if web:
        given = [f"--{k}" for k in ("full", "wrong") if getattr(args, k)]
        given += [f"--{k}" for k in ("limit", "status") if getattr(args, k) is not None]
        if given:
            parser.error(f"{', '.join(given)} filter the terminal table; in the browser, filter on the run page "
                         "(its URL keeps the filters, e.g. /run/0?status=error&right=wrong)")
    else:
        if len(args.paths) > 1:
            parser.error(f"{len(args.paths)} paths given: the terminal views show one run; "
                         "--serve or --html show several")
        moved = [f"--{k}" for k in ("host", "port", "token") if getattr(args, k) != parser.get_default(k)]
        if moved:
            parser.error(f"{', '.join(moved)} only apply with --serve")
    if args.html is not None and any(getattr(args, k) != parser.get_default(k) for k in ("host", "port", "token")):
        parser.error("--host, --port and --token apply to --serve, not --html (the file needs no server)")


def main(argv: Sequence[str] | None = None, console: Console | None = None, *,
         prog: str = "python -m rollout.view") -> int:
    """Run the viewer; a bad path, line or id prints one line to stderr and returns 2."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    _refuse_terminal_options(args, parser)
    console = console or ReadableConsole(highlight=False)
    try:
        if args.serve:
            args.token = args.token or os.environ.get(TOKEN_ENV) or None
            if args.host not in LOOPBACK and not args.token:
                raise ViewError(f"--host {args.host} would let other machines read these runs: give a token "
                                f"(--token <secret> or export {TOKEN_ENV}=<secret>), or keep the default 127.0.0.1")
        if args.serve or args.html is not None:
            from rollout.view.serve import serve_or_write

            return serve_or_write(args)
        if args.limit is None:
            args.limit = 50
        path = Path(args.paths[0])
        if args.follow:
            file = path / TRAJECTORY_FILE if path.is_dir() or not path.suffix else path
            return follow(file, args, console)
        file = trajectory_path(path)
        return show_task(file, args, console) if args.task is not None else show_table(file, args, console)
    except (ViewError, ReportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
