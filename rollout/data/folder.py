"""A corpus made from a folder of text files: each `.txt` or `.md` file under it is one document.

A directory named by `dataset.corpus.path` that `datasets.save_to_disk` did not write is read this
way. Files are found recursively and read in sorted relative-path order; hidden files and folders
(a name starting with '.') and other extensions are skipped. A document's id, `doc_id` and title
are its path relative to the folder with '/' separators (`guides/setup.md`), so every passage cut
from it still names its file; its text is the file's content read as UTF-8, with trailing spaces
and line-ending differences removed. Folder corpora are chunked by default (`FOLDER_CHUNK_TOKENS`),
since a file is often much longer than a retrieval passage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rollout.errors import DataError
from rollout.records import Passage

logger = logging.getLogger(__name__)

DOCUMENT_SUFFIXES = (".md", ".txt")
"""File extensions read as documents (matched case-insensitively)."""
FOLDER_CHUNK_TOKENS = 200
"""Chunk size of a folder corpus whose `chunk_tokens` is null."""

# The files `datasets.load_from_disk` looks for: a Dataset directory has both of the first two, a
# DatasetDict directory the third. Checked by name so that telling the two kinds apart needs no import.
_DATASET_FILES = ("dataset_info.json", "state.json")
_DATASET_DICT_FILE = "dataset_dict.json"


@dataclass(frozen=True, slots=True)
class FolderFile:
    """One document file of a folder corpus."""

    relpath: str
    """Path relative to the folder, '/'-separated: the document's id, doc_id and title."""
    path: Path
    """Where the file is."""


def is_source_folder(path: str | Path) -> bool:
    """True when `path` is a directory read as a folder of text documents (not a `save_to_disk` directory)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return False
    saved_dataset = all((path / name).is_file() for name in _DATASET_FILES)
    return not saved_dataset and not (path / _DATASET_DICT_FILE).is_file()


def folder_files(root: Path) -> list[FolderFile]:
    """The document files under `root`, sorted by relative path; `DataError` when there are none."""
    root = Path(root).expanduser()
    found: list[FolderFile] = []
    for directory, subdirs, names in os.walk(root):
        # Pruning in place keeps os.walk out of hidden folders such as .git, however large.
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        for name in names:
            if name.startswith(".") or not name.lower().endswith(DOCUMENT_SUFFIXES):
                continue
            path = Path(directory) / name
            found.append(FolderFile(path.relative_to(root).as_posix(), path))
    if not found:
        raise DataError(f"{root} holds no documents: a corpus folder is read for its {' and '.join(DOCUMENT_SUFFIXES)} "
                        "files (recursively, hidden ones skipped). Add some, point dataset.corpus.path at a corpus "
                        "file (.jsonl, .json, .parquet) or a save_to_disk directory, or read a folder of data files "
                        f"with dataset.corpus.path=null dataset.corpus.hf_name={str(root)!r}")
    found.sort(key=lambda f: f.relpath)
    return found


def folder_stamp(root: Path) -> list[list[object]]:
    """[relpath, size, mtime_ns] of every document file: changes whenever a document is added, removed or edited."""
    stamp: list[list[object]] = []
    for file in folder_files(root):
        st = file.path.stat()
        stamp.append([file.relpath, st.st_size, st.st_mtime_ns])
    return stamp


def iter_folder_documents(root: Path) -> Iterator[Passage]:
    """One whole-document passage per file, in relative-path order, with id = doc_id = title = the relative path."""
    for file in folder_files(root):
        yield Passage(file.relpath, file.relpath, read_document(file.path), doc_id=file.relpath)


def read_document(path: Path) -> str:
    """A file's text: UTF-8 (bytes that are not become U+FFFD, with a warning), lines right-stripped."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        logger.warning("%s: not valid UTF-8 (byte 0x%02x at byte offset %d); undecodable bytes are replaced by "
                       "U+FFFD. Save the file as UTF-8 to keep them", path, data[e.start], e.start)
        text = data.decode("utf-8", errors="replace")
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")
