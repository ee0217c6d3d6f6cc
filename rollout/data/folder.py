"""A corpus made from a folder of text files: each `.txt` or `.md` file under it is one document.

A directory named by `dataset.corpus.path` that `datasets.save_to_disk` did not write is read this
way. Files are found recursively and read in sorted relative-path order. Skipped: hidden files and
folders (a name starting with '.'), files whose extension `dataset.corpus.extensions` does not list
(default `.txt` and `.md`, matched case-insensitively), and what the folder's ignore files exclude:
`.gitignore` and `.rolloutignore`, in gitignore syntax, in the folder and in any sub-folder, read as git
reads them (a sub-folder's patterns are relative to it and take precedence over its parents'; an
excluded folder is not entered, so nothing under it can be re-included; in one folder `.rolloutignore`
comes after `.gitignore`, so it can re-include with `!`). A document's id, `doc_id` and title are its
path relative to the folder with '/' separators (`guides/setup.md`), so every passage cut from it still
names its file; its text is the file's content read as UTF-8, with trailing spaces and line-ending
differences removed. An empty (or whitespace-only) file is left out, and counted in a warning. Folder corpora
are chunked by default (`FOLDER_CHUNK_TOKENS`), since a file is often much longer than a retrieval passage.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from rollout.errors import DataError
from rollout.records import Passage

logger = logging.getLogger(__name__)

DEFAULT_EXTENSIONS = (".txt", ".md")
"""File extensions read as documents when `dataset.corpus.extensions` is not set."""
IGNORE_FILES = (".gitignore", ".rolloutignore")
"""Ignore files honoured in the folder and its sub-folders, in the order their patterns apply."""
FOLDER_CHUNK_TOKENS = 200
"""Chunk size of a folder corpus whose `chunk_tokens` is null."""

# The files `datasets.load_from_disk` looks for: a Dataset directory has both of the first two, a
# DatasetDict directory the third. Checked by name so that telling the two kinds apart needs no import.
_DATASET_FILES = ("dataset_info.json", "state.json")
_DATASET_DICT_FILE = "dataset_dict.json"
_FIX_EXTENSIONS = "e.g. dataset.corpus.extensions=[.txt,.md]"


@dataclass(frozen=True, slots=True)
class FolderFile:
    """One document file of a folder corpus."""

    relpath: str
    """Path relative to the folder, '/'-separated: the document's id, doc_id and title."""
    path: Path
    """Where the file is."""


def normalize_extensions(extensions: object) -> tuple[str, ...]:
    """`dataset.corpus.extensions` as sorted, lower-case, dotted suffixes ("md" and ".MD" are ".md");
    `DataError` naming the fix for an empty list, a non-list or an unusable entry."""
    if isinstance(extensions, str | bytes) or not isinstance(extensions, Sequence):
        raise DataError(f"dataset.corpus.extensions must be a list of file extensions, got {extensions!r}; "
                        f"{_FIX_EXTENSIONS}")
    if not extensions:
        raise DataError(f"dataset.corpus.extensions is empty, so a corpus folder would have no documents; list the "
                        f"extensions to read, {_FIX_EXTENSIONS}")
    found = set()
    for ext in extensions:
        bare = ext.strip().lstrip(".") if isinstance(ext, str) else ""
        # '#' would let a chunk id (`<path>#<i>`) look like a file's path; '/' would not be an extension.
        if not bare or any(c in bare for c in "/\\#") or any(c.isspace() for c in bare):
            raise DataError(f"dataset.corpus.extensions: {ext!r} is not a file extension (a name ending such as "
                            f"md or .md, without '/', '#' or spaces); {_FIX_EXTENSIONS}")
        found.add("." + bare.lower())
    return tuple(sorted(found))


def is_source_folder(path: str | Path) -> bool:
    """True when `path` is a directory read as a folder of text documents (not a `save_to_disk` directory)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return False
    saved_dataset = all((path / name).is_file() for name in _DATASET_FILES)
    return not saved_dataset and not (path / _DATASET_DICT_FILE).is_file()


@dataclass(frozen=True, slots=True)
class FolderListing:
    """What a folder corpus reads: its documents, and the ignore files that decided which."""

    documents: list[FolderFile]
    """Sorted by relative path."""
    ignore_files: list[FolderFile]
    """Every `IGNORE_FILES` file read, sorted by relative path."""


_Rules = tuple[tuple[str, GitIgnoreSpec], ...]
"""The ignore patterns in force in a folder: (folder relative to the root, its patterns), root first."""


def _ignored(rules: _Rules, relpath: str) -> bool:
    """Whether `relpath` (a folder ends in '/') is excluded: the deepest folder whose patterns match decides,
    and within one folder the last matching pattern."""
    decision = None
    for base, spec in rules:
        if base and not relpath.startswith(base + "/"):
            continue
        include = spec.check_file(relpath[len(base) + 1:] if base else relpath).include
        if include is not None:
            decision = include
    return bool(decision)


def _own_rules(directory: Path, base: str, names: Iterable[str], read: list[FolderFile]) -> _Rules:
    lines: list[str] = []
    for ignore in IGNORE_FILES:
        if ignore in names:
            path = directory / ignore
            read.append(FolderFile(f"{base}/{ignore}" if base else ignore, path))
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return ((base, GitIgnoreSpec.from_lines(lines)),) if lines else ()


def list_folder(root: Path, extensions: Iterable[str] = DEFAULT_EXTENSIONS) -> FolderListing:
    """The document files under `root` and the ignore files read; `DataError` when there is no document."""
    root = Path(root).expanduser()
    suffixes = normalize_extensions(list(extensions))
    found: list[FolderFile] = []
    ignore_files: list[FolderFile] = []
    rules: dict[str, _Rules] = {}
    for directory, subdirs, names in os.walk(root):
        base = Path(directory).relative_to(root).as_posix()
        base = "" if base == "." else base
        here = rules[base] = rules.get(base.rpartition("/")[0] if base else "", ()) + _own_rules(
            Path(directory), base, names, ignore_files)
        prefix = f"{base}/" if base else ""
        # Pruning in place keeps os.walk out of hidden and ignored folders such as .git or node_modules.
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and not _ignored(here, f"{prefix}{d}/")]
        for name in names:
            if name.startswith(".") or not name.lower().endswith(suffixes) or _ignored(here, prefix + name):
                continue
            found.append(FolderFile(prefix + name, Path(directory) / name))
    if not found:
        raise DataError(f"{root} holds no documents: a corpus folder is read for its {' and '.join(suffixes)} "
                        f"files (recursively; hidden ones and those {' or '.join(IGNORE_FILES)} exclude skipped). "
                        "Add some, list other extensions (dataset.corpus.extensions=[...]), point "
                        "dataset.corpus.path at a corpus file (.jsonl, .json, .parquet) or a save_to_disk directory, "
                        "or read a folder of data files with dataset.corpus.path=null "
                        f"dataset.corpus.hf_name={str(root)!r}")
    found.sort(key=lambda f: f.relpath)
    ignore_files.sort(key=lambda f: f.relpath)
    return FolderListing(found, ignore_files)


def folder_files(root: Path, extensions: Iterable[str] = DEFAULT_EXTENSIONS) -> list[FolderFile]:
    """The document files under `root`, sorted by relative path; `DataError` when there are none."""
    return list_folder(root, extensions).documents


def folder_stamp(root: Path, extensions: Iterable[str] = DEFAULT_EXTENSIONS) -> list[list[object]]:
    """[relpath, size, mtime_ns] of every document file, then [relpath, "sha256", digest] of every ignore file
    read: changes whenever a document is added, removed or edited, or an ignore file changes."""
    listing = list_folder(root, extensions)
    stamp: list[list[object]] = []
    for file in listing.documents:
        st = file.path.stat()
        stamp.append([file.relpath, st.st_size, st.st_mtime_ns])
    for file in listing.ignore_files:
        stamp.append([file.relpath, "sha256", hashlib.sha256(file.path.read_bytes()).hexdigest()])
    return stamp


def iter_folder_documents(root: Path, extensions: Iterable[str] = DEFAULT_EXTENSIONS) -> Iterator[Passage]:
    """One whole-document passage per file, in relative-path order, with id = doc_id = title = the relative path.

    An empty file (or one of whitespace only) is no document: as a passage it would be its title alone, which
    search can still rank. How many were left out is logged once, naming one; `DataError` when every file is empty."""
    empty: list[str] = []
    read = 0
    for file in folder_files(root, extensions):
        text = read_document(file.path)
        if not text.strip():
            empty.append(file.relpath)
            continue
        read += 1
        yield Passage(file.relpath, file.relpath, text, doc_id=file.relpath)
    if empty and not read:
        raise DataError(f"{root}: every document file is empty ({len(empty)}, e.g. {empty[0]}); a corpus needs text. "
                        "Point dataset.corpus.path at the folder holding your documents")
    if empty:
        logger.warning("%s: skipped %d empty file%s (no text), e.g. %s", root, len(empty),
                       "s" if len(empty) > 1 else "", empty[0])


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
