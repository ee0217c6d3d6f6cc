"""Rows of a corpus or question source, whatever its format, each with where it came from.

Formats: JSON lines (`.jsonl`, or `.json` holding one object per line), a `.json` array, a
`.parquet` file, a directory written by `datasets.Dataset(Dict).save_to_disk`, and anything
`datasets.load_dataset` reads (`hf_name`). Rows are streamed, so a 20 GB corpus is never held
twice; `datasets` and `pyarrow` are imported only for the formats that need them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rollout.errors import DataError
from rollout.jsonl import iter_json_lines

_BATCH = 1024
_TABLE_SUFFIXES = (".parquet", ".pq")
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


@dataclass(frozen=True, slots=True)
class Row:
    """One record of a source, before it is parsed."""

    index: int
    """0-based position among the source's records (blank lines not counted); generated ids use it."""
    number: int
    """Line number (1-based) for line sources, else the row index."""
    values: dict[str, Any] | None
    """The record's fields; None when the line is not a JSON object (see `problem`)."""
    problem: str | None = None
    """Why the line could not be read as an object."""


@dataclass(slots=True)
class RowSource:
    """An open source: its name for messages, its columns when known up front, and its rows."""

    name: str
    """The path, or a description of the Hugging Face dataset."""
    unit: Literal["line", "row"]
    """How locations are counted: file lines or table rows."""
    columns: list[str] | None
    """Column names of a table source; None for JSON lines, whose keys vary per line."""
    rows: Iterator[Row]

    def where(self, number: int) -> str:
        """`path:12` for a line, `source row 12` for a table row."""
        return f"{self.name}:{number}" if self.unit == "line" else f"{self.name} row {number}"


def is_plain_jsonl(path: Path) -> bool:
    """True for a file read line by line (not a `.json` array, not a table)."""
    return path.is_file() and path.suffix.lower() in _JSON_SUFFIXES and not _starts_with_bracket(path)


def open_path(path: str | Path, *, split: str, expected: str) -> RowSource:
    """Rows of a local file or `save_to_disk` directory; `DataError` naming the formats if unreadable."""
    path = Path(path).expanduser()
    if path.is_dir():
        return _open_saved_dataset(path, split, expected)
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file; expected {expected}")
    suffix = path.suffix.lower()
    if suffix in _TABLE_SUFFIXES:
        return _open_parquet(path, expected)
    if suffix in _JSON_SUFFIXES or suffix == "":
        if _starts_with_bracket(path):
            return _open_json_array(path, expected)
        return RowSource(str(path), "line", None, _json_lines(path))
    raise DataError(f"{path}: unknown file type {suffix!r}; use a .jsonl, .json or .parquet file, a "
                    f"save_to_disk directory, or hf_name=<loader> with data_files=<files>. Expected {expected}")


def open_hf(hf_name: str, hf_config: str | None, split: str, data_files: str | list[str] | None,
            name: str) -> RowSource:
    """Rows of `datasets.load_dataset(hf_name, hf_config, split=split, data_files=data_files)`."""
    import datasets

    try:
        dataset = datasets.load_dataset(hf_name, hf_config, split=split, data_files=data_files)
    # `datasets` signals a missing dataset, config, split or cache entry with many exception types.
    except Exception as e:  # noqa: BLE001
        raise DataError(
            f"could not load {name}: {type(e).__name__}: {e}. Check hf_name, hf_config and split; offline "
            "(HF_DATASETS_OFFLINE=1) the dataset must already be in the Hugging Face cache, or save it "
            "with save_to_disk and set path=<that directory> instead"
        ) from e
    return _table_source(name, dataset)


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _json_lines(path: Path) -> Iterator[Row]:
    for index, (lineno, obj, problem) in enumerate(iter_json_lines(path)):
        yield Row(index, lineno, obj, problem)


def _open_json_array(path: Path, expected: str) -> RowSource:
    try:
        with path.open(encoding="utf-8-sig") as f:
            items = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); expected {expected}") from e
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 (byte 0x{e.object[e.start]:02x} at byte offset {e.start}); "
                        f"save the file as UTF-8. Expected {expected}") from e

    def rows() -> Iterator[Row]:
        for i, item in enumerate(items):
            if isinstance(item, dict):
                yield Row(i, i, item)
            else:
                yield Row(i, i, None, f"expected a JSON object, got {type(item).__name__}")

    return RowSource(str(path), "row", None, rows())


def _open_parquet(path: Path, expected: str) -> RowSource:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e}); expected {expected}") from e

    def rows() -> Iterator[Row]:
        index = 0
        for batch in parquet.iter_batches(batch_size=_BATCH):
            for values in batch.to_pylist():
                yield Row(index, index, values)
                index += 1

    return RowSource(str(path), "row", list(parquet.schema_arrow.names), rows())


def _open_saved_dataset(path: Path, split: str, expected: str) -> RowSource:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise DataError(f"{path} is a directory but not one written by save_to_disk; point path= at a file, "
                        f"or read the directory with hf_name={str(path)!r} (datasets.load_dataset). "
                        f"Expected {expected}") from e
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataError(f"{path} has no split {split!r}; its splits are {', '.join(loaded)}. "
                            "Set split=<one of them>")
        loaded = loaded[split]
    return _table_source(str(path), loaded)


def _table_source(name: str, dataset: Any) -> RowSource:
    columns = list(dataset.column_names)

    def rows() -> Iterator[Row]:
        index = 0
        for batch in dataset.iter(batch_size=_BATCH):
            for j in range(len(batch[columns[0]]) if columns else 0):
                yield Row(index, index, {c: batch[c][j] for c in columns})
                index += 1

    return RowSource(name, "row", columns, rows())
