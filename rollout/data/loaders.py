"""Read corpora and question sets from JSON-lines files (FlashRAG conventions).

A malformed line is logged with its file and line number and skipped, so one bad record
does not cost a whole run; a file with nothing usable, or an id used twice, is an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rollout.data.errors import DataError
from rollout.data.records import Passage, Question

logger = logging.getLogger(__name__)

CORPUS_FORMAT = ('one JSON object per line: {"id": ..., "contents": "Title\\ntext"} '
                 'or {"id": ..., "title": ..., "text": ...}')
QUESTIONS_FORMAT = ('one JSON object per line: {"id": ..., "question": "...", '
                    '"golden_answers": ["..."], "metadata": {...}}')
_MAX_WARNINGS = 20  # per file; the rest are counted in one summary line

T = TypeVar("T", Passage, Question)


class _Malformed(ValueError):
    """A line that is valid JSON but not a usable record; the message says what is wrong."""


def _as_id(obj: dict[str, Any]) -> str:
    value = obj.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise _Malformed(f"'id' must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _parse_passage(obj: dict[str, Any]) -> Passage:
    doc_id = _as_id(obj)
    if "contents" in obj:
        contents = obj["contents"]
        if not isinstance(contents, str):
            raise _Malformed(f"'contents' must be a string, got {type(contents).__name__}")
        title, _, text = contents.partition("\n")
        return Passage(doc_id, title, text)
    title, text = obj.get("title"), obj.get("text")
    if not isinstance(title, str) or not isinstance(text, str):
        raise _Malformed("needs a string 'contents', or string 'title' and 'text'")
    return Passage(doc_id, title, text)


def _parse_question(obj: dict[str, Any]) -> Question:
    question_id = _as_id(obj)
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise _Malformed(f"'question' must be a non-empty string, got {question!r}")
    answers = obj.get("golden_answers")
    if not isinstance(answers, list) or not answers:
        raise _Malformed(f"'golden_answers' must be a non-empty list, got {answers!r}")
    if not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in answers):
        raise _Malformed(f"'golden_answers' must hold strings or numbers, got {answers!r}")
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise _Malformed(f"'metadata' must be an object, got {type(metadata).__name__}")
    return Question(question_id, question, [str(a) for a in answers], metadata)


def _read_records(path: Path, parse: Callable[[dict[str, Any]], T], expected: str) -> Iterator[tuple[int, T]]:
    """Yield (line number, record) for each usable line; log and skip the rest."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file; expected {expected}")
    skipped = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise _Malformed(f"expected a JSON object, got {type(obj).__name__}")
                record = parse(obj)
            except (json.JSONDecodeError, _Malformed) as e:
                skipped += 1
                if skipped <= _MAX_WARNINGS:
                    logger.warning("%s:%d: skipped malformed line (%s); expected %s", path, lineno, e, expected)
                continue
            yield lineno, record
    if skipped > _MAX_WARNINGS:
        logger.warning("%s: %d malformed lines skipped in all", path, skipped)


def _collect(path: Path, parse: Callable[[dict[str, Any]], T], expected: str, limit: int | None) -> list[T]:
    records: list[T] = []
    first_line: dict[str, int] = {}
    for lineno, record in _read_records(path, parse, expected):
        record_id = record.id
        if record_id in first_line:
            raise DataError(f"{path}:{lineno}: id {record_id!r} was already used on line "
                            f"{first_line[record_id]}; ids must be unique")
        first_line[record_id] = lineno
        records.append(record)
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise DataError(f"{path} has no usable line; expected {expected}")
    return records


def load_corpus(path: Path | str) -> list[Passage]:
    """Passages of a FlashRAG corpus file (`contents` = title, newline, text) or of title/text lines."""
    return _collect(Path(path), _parse_passage, CORPUS_FORMAT, None)


def load_questions(path: Path | str, *, limit: int | None = None) -> list[Question]:
    """The first `limit` usable questions of a question file (all when `limit` is None)."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit} must be at least 1; use None (dataset.limit=null) for all questions")
    return _collect(Path(path), _parse_question, QUESTIONS_FORMAT, limit)
