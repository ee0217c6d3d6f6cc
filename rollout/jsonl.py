"""Reading the run's append-only jsonl files, which a crash can leave with a half-written last line."""

from __future__ import annotations

import codecs
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def iter_text_lines(path: Path) -> Iterator[tuple[int, str | None, str | None]]:
    """(1-based line number, text, problem) for each line of a UTF-8 file.

    Each line is decoded on its own, so one line with bytes that are not UTF-8 (a file written
    in another encoding, or cut mid-character) costs that line only: its text is None and
    `problem` says why. A byte-order mark at the start of the file is dropped silently.
    """
    with Path(path).open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield lineno, raw.decode("utf-8"), None
            except UnicodeDecodeError as e:
                yield lineno, None, (f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the "
                                     "line); save the file as UTF-8")


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(line number, JSON object or None, what is wrong with the line or None) per non-blank line."""
    for lineno, line, problem in iter_text_lines(path):
        if line is None:
            yield lineno, None, f"a line that is {problem}"
            continue
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            yield lineno, None, f"not valid JSON ({e.msg}; half-written?)"
            continue
        if not isinstance(row, dict):
            yield lineno, None, f"a JSON {type(row).__name__}, not an object"
            continue
        yield lineno, row, None


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a jsonl file, one at a time; nothing when the file is missing.

    A line that is not a JSON object (one cut short when a run was killed mid-write, or one
    that is not UTF-8) is skipped with a warning naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        return
    for lineno, row, problem in iter_json_lines(path):
        if row is None:
            logger.warning("%s:%d: skipping a line: %s", path, lineno, problem)
            continue
        yield row


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All of `iter_jsonl`, for files small enough to hold."""
    return list(iter_jsonl(path))
