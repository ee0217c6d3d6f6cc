"""Where a corpus or a question set comes from: typed specs, the `corpus:` and `questions:` of `conf/dataset/*.yaml`.

A spec names exactly one source — a local `path` or a Hugging Face `hf_name` — and may map our
field names to the source's column names. Specs are plain values; they are checked when loaded
(`check()`), so a demo config that leaves both sources empty still builds one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.data.folder import DEFAULT_EXTENSIONS, FOLDER_CHUNK_TOKENS, is_source_folder, normalize_extensions
from rollout.errors import DataError

CORPUS_FIELDS = ("id", "contents", "title", "text", "doc_id")
QUESTION_FIELDS = ("id", "question", "golden_answers", "metadata", "gold_doc_ids")


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus source (`dataset.corpus`)."""

    path: str | None = None
    """A .jsonl/.json file (FlashRAG `contents`, or id/title/text), a .parquet file, a
    directory written by `datasets.Dataset.save_to_disk`, or any other directory: a folder whose
    .txt and .md files (`extensions`) are the documents (`rollout.data.folder`)."""
    hf_name: str | None = None
    """A Hugging Face dataset name, or a local dataset script or directory, read with
    `datasets.load_dataset` (offline from the local cache when `HF_DATASETS_OFFLINE=1`)."""
    hf_config: str | None = None
    """The dataset's configuration (subset) name, if it has several."""
    split: str = "train"
    """Split to read (Hugging Face datasets and `save_to_disk` directories holding several splits)."""
    data_files: str | list[str] | None = None
    """`data_files` for `load_dataset`, e.g. with `hf_name: json` or `hf_name: parquet`."""
    columns: Mapping[str, str] = field(default_factory=dict)
    """Our field -> the source's column: `id`, `contents` or `title` + `text`, `doc_id`.
    A field not mapped is read from the column of the same name."""
    chunk_tokens: int | None = None
    """Split documents longer than this many whitespace tokens into passages (None: never, except
    for a folder of documents, which is chunked by `FOLDER_CHUNK_TOKENS`)."""
    chunk_overlap: int = 32
    """Tokens shared by consecutive chunks of one document."""
    extensions: Sequence[str] = DEFAULT_EXTENSIONS
    """File extensions a folder corpus reads as documents, with or without the dot, matched case-insensitively
    (kept sorted, lower-case and dotted). Only a folder has them: another source refuses a change."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", _mapped(self.columns))
        try:  # one spelling per set, so that ["md", ".TXT"] and [.txt, .md] are one cache key and one identity
            object.__setattr__(self, "extensions", normalize_extensions(self.extensions))
        except DataError:
            pass  # reported by check(), with the fix

    def check(self) -> None:
        """Raise `DataError` naming the setting to fix when the spec cannot be loaded."""
        _check_source("corpus", self.path, self.hf_name, self.data_files)
        _check_columns("corpus", self.columns, CORPUS_FIELDS)
        extensions = normalize_extensions(self.extensions)
        folder = self.is_folder()
        if self.columns and folder:
            unset = " ".join(f"dataset.corpus.columns.{ours}=null" for ours in self.columns)
            raise DataError(f"corpus: {self.path} is a folder of {'/'.join(extensions)} documents, whose ids "
                            "and titles are the files' relative paths and whose text is their content, so columns "
                            f"{dict(self.columns)} cannot apply; remove the mapping ({unset})")
        if not folder and extensions != normalize_extensions(DEFAULT_EXTENSIONS):
            raise DataError(f"corpus: dataset.corpus.extensions={list(extensions)} chooses the files of a corpus "
                            f"folder, and {self.source} is not a folder; remove the setting, or point "
                            "dataset.corpus.path at a folder of documents")
        chunk_tokens = self.effective_chunk_tokens()
        if chunk_tokens is not None:
            check_chunking(chunk_tokens, self.chunk_overlap)

    def is_folder(self) -> bool:
        """True when `path` is a folder of text documents (see `rollout.data.folder.is_source_folder`)."""
        return bool(self.path) and is_source_folder(Path(str(self.path)))

    def effective_chunk_tokens(self) -> int | None:
        """The chunk size loading uses: `chunk_tokens`, or `FOLDER_CHUNK_TOKENS` for a folder when it is null."""
        if self.chunk_tokens is None and self.is_folder():
            return FOLDER_CHUNK_TOKENS
        return self.chunk_tokens

    @property
    def source(self) -> str:
        """Human-readable name of the source, for messages."""
        return _describe(self.path, self.hf_name, self.hf_config, self.split, self.data_files)


@dataclass(frozen=True)
class QuestionSpec:
    """A question-set source (`dataset.questions`)."""

    path: str | None = None
    """A .jsonl/.json file, a .parquet file, or a `save_to_disk` directory."""
    hf_name: str | None = None
    """A Hugging Face dataset name, or a local dataset script or directory (`datasets.load_dataset`)."""
    hf_config: str | None = None
    """The dataset's configuration (subset) name, e.g. `nq` in RUC-NLPIR/FlashRAG_datasets."""
    split: str = "test"
    """Split to read."""
    data_files: str | list[str] | None = None
    """`data_files` for `load_dataset`, e.g. with `hf_name: json`."""
    columns: Mapping[str, str] = field(default_factory=dict)
    """Our field -> the source's column: `id`, `question`, `golden_answers` (a list column or a
    single string column), `metadata`, `gold_doc_ids` (stored in the question's metadata)."""
    skip_bad_lines: bool = False
    """Skip a line (row) that is not a usable question, with a warning and a count of those skipped; False
    refuses the whole source at the first one, so a comparison never runs on fewer questions unnoticed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", _mapped(self.columns))

    def check(self) -> None:
        """Raise `DataError` naming the setting to fix when the spec cannot be loaded."""
        _check_source("questions", self.path, self.hf_name, self.data_files)
        _check_columns("questions", self.columns, QUESTION_FIELDS)
        if not isinstance(self.skip_bad_lines, bool):
            raise DataError(f"dataset.questions.skip_bad_lines={self.skip_bad_lines!r} must be true or false; "
                            "set dataset.questions.skip_bad_lines=true to skip unreadable question lines")

    @property
    def source(self) -> str:
        """Human-readable name of the source, for messages."""
        return _describe(self.path, self.hf_name, self.hf_config, self.split, self.data_files)


def check_chunking(max_tokens: int, overlap: int) -> None:
    """Chunk windows must hold at least one token and advance by at least one."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise DataError(f"chunk_tokens={max_tokens!r} must be a positive integer; "
                        "set dataset.corpus.chunk_tokens=100, or null to keep documents whole")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < max_tokens:
        raise DataError(f"chunk_overlap={overlap!r} must be an integer from 0 to chunk_tokens - 1 "
                        f"(= {max_tokens - 1}); set dataset.corpus.chunk_overlap={min(32, max_tokens // 4)}")


def _check_source(section: str, path: str | None, hf_name: str | None, data_files: object) -> None:
    key = f"dataset.{section}"
    if path and hf_name:
        raise DataError(f"{section}: both path={path!r} and hf_name={hf_name!r} are set; keep one and "
                        f"set the other to null ({key}.path=null or {key}.hf_name=null)")
    if not path and not hf_name:
        raise DataError(f"{section}: no source; set {key}.path=<file or save_to_disk directory> "
                        f"or {key}.hf_name=<Hugging Face dataset>")
    if path and data_files:
        raise DataError(f"{section}: data_files is read only with hf_name; set {key}.data_files=null "
                        f"or use {key}.hf_name=json (or parquet) with {key}.path=null")


def _mapped(columns: Any) -> Any:
    """The mapped fields of `columns`: the shipped configs list every field, null where it is not mapped."""
    return {k: v for k, v in columns.items() if v is not None} if isinstance(columns, Mapping) else columns


def _check_columns(section: str, columns: Mapping[str, str], known: tuple[str, ...]) -> None:
    if not isinstance(columns, Mapping):
        raise DataError(f"{section}: columns must map our field to the source's column, e.g. "
                        f"{{id: doc_key}}; got {columns!r}")
    for ours, theirs in columns.items():
        if ours not in known:
            raise DataError(f"{section}: unknown field {ours!r} in columns; "
                            f"the fields are {', '.join(known)} (each mapped to a column name)")
        if not isinstance(theirs, str) or not theirs:
            raise DataError(f"{section}: columns.{ours} must be a column name, got {theirs!r}")


def _describe(path: str | None, hf_name: str | None, hf_config: str | None, split: str,
              data_files: str | list[str] | None) -> str:
    if path:
        return str(path)
    config = f", config {hf_config}" if hf_config else ""
    files = f", data_files {data_files}" if data_files else ""
    return f"Hugging Face dataset {hf_name}{config}{files}, split {split}"
