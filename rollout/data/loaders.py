"""Read corpora and question sets from any source a spec names (FlashRAG conventions by default).

A malformed corpus record is logged with its file and line (or row) number and skipped, so one bad
record does not cost a whole run. A question that cannot be read stops the load naming its line,
since a run on fewer questions than the file holds would not compare with others, unless
`dataset.questions.skip_bad_lines` is set: then it is skipped, and how many were is logged once. A
source with nothing usable, or an id used twice, is an error. Records without an `id` get their
0-based row number as id, with one warning.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rollout.data.chunking import iter_chunks
from rollout.data.folder import iter_folder_documents
from rollout.data.sources import RowSource, open_hf, open_path
from rollout.data.specs import CORPUS_FIELDS, QUESTION_FIELDS, CorpusSpec, QuestionSpec
from rollout.errors import DataError
from rollout.records import Passage, Question

logger = logging.getLogger(__name__)

CORPUS_FORMAT = ('one JSON object per line: {"id": ..., "contents": "Title\\ntext"} '
                 'or {"id": ..., "title": ..., "text": ...} (or a .parquet file / save_to_disk '
                 'directory with those columns; map other column names with dataset.corpus.columns, '
                 'e.g. dataset.corpus.columns.text=body), or a folder of .txt/.md files')
QUESTIONS_FORMAT = ('one JSON object per line: {"id": ..., "question": "...", '
                    '"golden_answers": ["..."], "metadata": {...}} (or a .parquet file / save_to_disk '
                    'directory with those columns; map other column names with dataset.questions.columns, '
                    'e.g. dataset.questions.columns.golden_answers=answers)')
_MAX_WARNINGS = 20  # per source; the rest are counted in one summary line

T = TypeVar("T", Passage, Question)
Parser = Callable[[dict[str, Any], str], T]
"""Turns a record's fields (already renamed to ours) and its fallback id into a record."""


class _Malformed(ValueError):
    """A record that is valid JSON but not usable; the message says what is wrong."""


class _Missing(_Malformed):
    """A record without one of the fields it needs (named by our field name)."""

    def __init__(self, ours: str) -> None:
        super().__init__(ours)
        self.ours = ours


def _as_id(value: Any, name: str = "id") -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise _Malformed(f"{name!r} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _as_strings(value: Any, name: str) -> list[str]:
    """A list of strings or numbers, or a single one (wrapped), as a non-empty list of strings."""
    items = [value] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise _Malformed(f"{name!r} must be a non-empty list or a string, got {value!r}")
    if not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) and a != "" for a in items):
        raise _Malformed(f"{name!r} must hold non-empty strings or numbers, got {value!r}")
    return [str(a) for a in items]


def _passage_parser(columns: Mapping[str, str]) -> Parser[Passage]:
    # With `contents` mapped, or title/text not mapped, FlashRAG's `contents` wins when present.
    use_contents = "contents" in columns or not ({"title", "text"} & set(columns))

    def parse(obj: dict[str, Any], fallback_id: str) -> Passage:
        pid = _as_id(obj["id"]) if "id" in obj else fallback_id
        doc_id = obj.get("doc_id")
        doc_id = None if doc_id is None else _as_id(doc_id, "doc_id")
        if use_contents and "contents" in obj:
            contents = obj["contents"]
            if not isinstance(contents, str):
                raise _Malformed(f"'contents' must be a string, got {type(contents).__name__}")
            title, _, text = contents.partition("\n")
            return Passage(pid, title, text, doc_id)
        title, text = obj.get("title"), obj.get("text")
        if not isinstance(text, str) or not (title is None or isinstance(title, str)):
            raise _Malformed("needs a string 'contents', or a string 'text' (and optionally 'title')")
        return Passage(pid, title or "", text, doc_id)

    return parse


def _parse_question(obj: dict[str, Any], fallback_id: str) -> Question:
    qid = _as_id(obj["id"]) if "id" in obj else fallback_id
    for needed in ("question", "golden_answers"):
        if obj.get(needed) is None:
            raise _Missing(needed)
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise _Malformed(f"'question' must be a non-empty string, got {question!r}")
    answers = _as_strings(obj.get("golden_answers"), "golden_answers")
    metadata = obj.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _Malformed(f"'metadata' must be an object, got {type(metadata).__name__}")
    metadata = dict(metadata)
    if obj.get("gold_doc_ids") is not None:
        metadata["gold_doc_ids"] = _as_strings(obj["gold_doc_ids"], "gold_doc_ids")
    return Question(qid, question, answers, metadata)


def _records(source: RowSource, parse: Parser[T], columns: Mapping[str, str], fields: tuple[str, ...],
             section: str, expected: str, *, skip_bad: bool = True, warn: bool = True) -> Iterator[tuple[int, T]]:
    """Yield (line or row number, record) for each usable record. An unusable one is skipped (`skip_bad`, logged
    when `warn`: a source read several times warns on one pass) or is a `DataError` naming it and the fix."""
    if source.columns is not None:
        absent = {ours: theirs for ours, theirs in columns.items() if theirs not in source.columns}
        if absent:
            raise DataError(f"{source.name}: no column {', '.join(map(repr, absent.values()))} (mapped by "
                            f"dataset.{section}.columns); its columns are {', '.join(source.columns)}")
    names = {ours: columns.get(ours, ours) for ours in fields}
    skipped = used = 0
    warned_ids = not warn
    try:
        for row in source.rows:
            try:
                if row.values is None:
                    raise _Malformed(row.problem)
                obj = {ours: row.values[theirs] for ours, theirs in names.items() if theirs in row.values}
                record = parse(obj, str(row.index))
            except _Malformed as e:
                problem = _problem(e, names, section)
                if not skip_bad:
                    raise DataError(f"{source.where(row.number)}: {problem}; expected {expected}. Fix or remove "
                                    f"the {source.unit}, or skip unreadable {source.unit}s with "
                                    f"dataset.{section}.skip_bad_lines=true") from None
                skipped += 1
                if warn and skipped <= _MAX_WARNINGS:
                    logger.warning("%s: skipped malformed %s (%s); expected %s",
                                   source.where(row.number), source.unit, problem, expected)
                continue
            if not warned_ids and "id" not in obj:
                warned_ids = True
                logger.warning("%s: records have no %r field; using each record's 0-based row number as its id. "
                               "Map an id column with dataset.%s.columns.id=<column>", source.where(row.number),
                               names["id"], section)
            used += 1
            yield row.number, record
    finally:  # also when a limit stops reading early
        if warn and skipped and used:
            logger.warning("%s: %d malformed %s(s) skipped in all, %d %s read", source.name, skipped, source.unit,
                           used, "questions" if section == "questions" else "records")
    if not used:
        seen = f"; its columns are {', '.join(source.columns)}" if source.columns is not None else ""
        mapped = f" with dataset.{section}.columns={dict(columns)}" if columns else ""
        raise DataError(f"{source.name} has no usable {source.unit}{mapped}{seen}; expected {expected}")


def _problem(error: _Malformed, names: Mapping[str, str], section: str) -> str:
    """What is wrong with a record, a missing field named with the column it was read from and the mapping's syntax."""
    if isinstance(error, _Missing):
        return (f"no {names[error.ours]!r} field (if your column has another name, map it with "
                f"dataset.{section}.columns.{error.ours}=<column>)")
    return str(error)


def _open(spec: CorpusSpec | QuestionSpec, expected: str) -> RowSource:
    spec.check()
    if spec.path:
        return open_path(spec.path, split=spec.split, expected=expected)
    assert spec.hf_name is not None  # check() guarantees one source
    return open_hf(spec.hf_name, spec.hf_config, spec.split, spec.data_files, spec.source)


class _UniqueIds:
    """Remembers where each id was first used; a second use is a `DataError` naming both places."""

    def __init__(self, source: RowSource) -> None:
        self._source = source
        self._first: dict[str, int] = {}

    def add(self, record_id: str, number: int, note: str = "") -> None:
        first = self._first.setdefault(record_id, number)
        if first != number:
            raise DataError(f"{self._source.where(number)}: id {record_id!r}{note} was already used on "
                            f"{self._source.unit} {first}; ids must be unique")


def iter_corpus_spec(spec: CorpusSpec, *, check_ids: bool = True) -> Iterator[Passage]:
    """Stream the passages of `spec`, chunked when `chunk_tokens` is set or the source is a folder of documents
    (used to materialize big corpora). `check_ids=False` leaves the check that ids are unique (a dict of every
    id) to the caller: the corpus store checks its sorted id hashes instead."""
    if spec.is_folder():
        yield from _iter_folder_corpus(spec)
        return
    source = _open(spec, CORPUS_FORMAT)
    ids = _UniqueIds(source) if check_ids else None
    parse = _passage_parser(spec.columns)
    for number, doc in _records(source, parse, spec.columns, CORPUS_FIELDS, "corpus", CORPUS_FORMAT):
        if ids is not None:
            ids.add(doc.id, number)
        if spec.chunk_tokens is None:
            yield doc
            continue
        for chunk in iter_chunks(doc, max_tokens=spec.chunk_tokens, overlap=spec.chunk_overlap):
            if chunk is not doc and ids is not None:
                ids.add(chunk.id, number, f" (chunk of document {doc.id!r})")
            yield chunk


def _iter_folder_corpus(spec: CorpusSpec) -> Iterator[Passage]:
    spec.check()
    chunk_tokens = spec.effective_chunk_tokens()
    assert chunk_tokens is not None and spec.path  # a folder always has a chunk size
    # Ids need no uniqueness check: relative paths are unique, and a chunk id (`<path>#<i>`) never ends in
    # one of the extensions read (they hold no '#'), so it cannot be another file's path.
    for doc in iter_folder_documents(Path(spec.path), spec.extensions):
        yield from iter_chunks(doc, max_tokens=chunk_tokens, overlap=spec.chunk_overlap)


def load_corpus_spec(spec: CorpusSpec) -> list[Passage]:
    """All passages of the corpus `spec` names (chunked when `chunk_tokens` is set)."""
    return list(iter_corpus_spec(spec))


def load_question_spec(spec: QuestionSpec, *, limit: int | None = None) -> list[Question]:
    """The first `limit` usable questions of the source `spec` names (all when `limit` is None)."""
    source = _open(spec, QUESTIONS_FORMAT)
    ids = _UniqueIds(source)
    questions: list[Question] = []
    for number, question in _question_records(source, spec, limit):
        ids.add(question.id, number)
        questions.append(question)
    return questions


def _question_records(source: RowSource, spec: QuestionSpec, limit: int | None,
                      warn: bool = True) -> Iterator[tuple[int, Question]]:
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit} must be at least 1; use None (dataset.limit=null) for all questions")
    records = _records(source, _parse_question, spec.columns, QUESTION_FIELDS, "questions", QUESTIONS_FORMAT,
                       skip_bad=spec.skip_bad_lines, warn=warn)
    for used, record in enumerate(records, start=1):
        yield record
        if limit is not None and used >= limit:
            return


def iter_question_spec(spec: QuestionSpec, *, limit: int | None = None) -> Iterator[Question]:
    """`load_question_spec` one question at a time, read from the source on each call; ids are checked, and
    skipped lines reported, by `count_question_spec`, which a caller runs once first."""
    for _, question in _question_records(_open(spec, QUESTIONS_FORMAT), spec, limit, warn=False):
        yield question


def count_question_spec(spec: QuestionSpec, *, limit: int | None = None, warn: bool = True) -> int:
    """How many questions `iter_question_spec` yields; an id used twice is the `DataError` `load_question_spec`
    raises, and lines skipped are logged (when `warn`). Holds 8 bytes per question (a hash of its id), not the
    questions or their ids."""
    hashes = array("q")
    for _, question in _question_records(_open(spec, QUESTIONS_FORMAT), spec, limit, warn):
        hashes.append(hash(question.id))
    # Equal hashes are almost always one id used twice; only those ids are looked at again, exactly.
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64)) if hashes else np.zeros(0, np.int64)
    suspects = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    if suspects:
        source = _open(spec, QUESTIONS_FORMAT)
        ids = _UniqueIds(source)
        for number, question in _question_records(source, spec, limit, warn=False):
            if hash(question.id) in suspects:
                ids.add(question.id, number)
    return len(hashes)


def load_corpus(path: Path | str) -> list[Passage]:
    """Passages of a FlashRAG corpus file (`contents` = title, newline, text) or of title/text records."""
    return load_corpus_spec(CorpusSpec(path=str(path)))


def load_questions(path: Path | str, *, limit: int | None = None) -> list[Question]:
    """The first `limit` usable questions of a question file (all when `limit` is None)."""
    return load_question_spec(QuestionSpec(path=str(path)), limit=limit)
