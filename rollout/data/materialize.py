"""Turn any corpus spec into the one FlashRAG jsonl file the gateway reads.

A plain JSON-lines file, neither chunked nor column-mapped, is used where it lies: corpora can be
20 GB. Anything else (parquet, `save_to_disk`, a folder of documents, Hugging Face, chunked,
mapped) is streamed once into `cache_dir/corpus-<key>.jsonl`, written to a temporary file and
renamed, and reused while the key holds. The key covers the spec (with the chunk size actually
used), the size and modification time of every local source file (for a folder, of every
document file it reads, with its extensions and the content of its ignore files), and the output
format version. A Hub dataset has no local file to watch: delete its `corpus-*.jsonl` to re-read it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

from rollout.cache_folder import temp_prefix, writes_cache
from rollout.data.folder import folder_stamp, is_source_folder
from rollout.data.loaders import CORPUS_FORMAT, iter_corpus_spec
from rollout.data.sources import is_plain_jsonl
from rollout.data.specs import CorpusSpec
from rollout.errors import DataError

logger = logging.getLogger(__name__)

_FORMAT_VERSION = 1
"""Bump when the materialized output for the same spec changes (parsing, chunking)."""


@writes_cache
def materialize_corpus(spec: CorpusSpec, cache_dir: Path) -> Path:
    """Path of a FlashRAG jsonl holding the corpus `spec` names: the source itself when it already is one."""
    spec.check()
    if spec.path and not spec.columns and spec.chunk_tokens is None and is_plain_jsonl(Path(spec.path).expanduser()):
        return Path(spec.path).expanduser()
    target = Path(cache_dir) / f"corpus-{corpus_cache_key(spec)}.jsonl"
    if target.is_file():
        logger.debug("Reusing materialized corpus %s for %s", target, spec.source)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Writing corpus from %s to %s (once; later runs reuse it)", spec.source, target)
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(target.name), dir=target.parent)
    try:
        n = 0
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for passage in iter_corpus_spec(spec):
                f.write(json.dumps(passage.to_json(), ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    logger.info("Wrote %d passages to %s", n, target)
    return target


def corpus_cache_key(spec: CorpusSpec) -> str:
    """16 hex digits naming what `spec` reads: its settings and the size and mtime of its files."""
    settings: dict[str, Any] = {f.name: getattr(spec, f.name) for f in fields(spec)}
    settings["columns"] = dict(sorted(dict(spec.columns).items()))
    # A folder's default chunk size is part of what is written; other specs keep their keys (same value).
    settings["chunk_tokens"] = spec.effective_chunk_tokens()
    if spec.data_files is not None and not isinstance(spec.data_files, str):
        settings["data_files"] = list(spec.data_files)
    folder = bool(spec.path) and is_source_folder(Path(str(spec.path)).expanduser())
    if not folder:
        del settings["extensions"]  # only a folder reads them: other corpora keep the keys they had
    if spec.path:
        path = Path(spec.path).expanduser().resolve()
        settings["path"] = str(path)
        # Only the files a folder corpus reads (and the ignore files that chose them): an edit under .git or to a
        # script must not rewrite it.
        stamp = folder_stamp(path, spec.extensions) if folder else _stamp(path)
    else:
        assert spec.hf_name is not None  # check() guarantees one source
        local = Path(spec.hf_name).expanduser()
        stamp = _stamp(local.resolve()) if local.exists() else []
        stamp += _data_files_stamp(spec.data_files)
    blob = json.dumps({"version": _FORMAT_VERSION, "spec": settings, "files": stamp}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _stamp(path: Path) -> list[list[Any]]:
    """[name, size, mtime_ns] of the file, or of every file under the directory."""
    if path.is_file():
        st = path.stat()
        return [[str(path), st.st_size, st.st_mtime_ns]]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    raise DataError(f"{path} does not exist; expected a corpus: {CORPUS_FORMAT}")


def _data_files_stamp(data_files: str | list[str] | None) -> list[list[Any]]:
    patterns = [data_files] if isinstance(data_files, str) else list(data_files or [])
    stamp: list[list[Any]] = []
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.expanduser(str(pattern)), recursive=True))
        stamp += [row for m in matches for row in _stamp(Path(m).resolve())] or [[str(pattern), None, None]]
    return stamp
