"""Reading the run's append-only jsonl files, which a crash can leave with a half-written last line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a jsonl file, one at a time; nothing when the file is missing.

    A line that is not a JSON object (one cut short when a run was killed mid-write) is
    skipped with a warning naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        return
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                logger.warning("%s:%d: skipping a line that is not valid JSON (%s; half-written?)", path, lineno, e.msg)
                continue
            if not isinstance(row, dict):
                logger.warning("%s:%d: skipping a line that is not a JSON object", path, lineno)
                continue
            yield row


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All of `iter_jsonl`, for files small enough to hold."""
    return list(iter_jsonl(path))
