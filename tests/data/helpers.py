"""Write the same records in each source format a spec can name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = ("jsonl", "json-array", "parquet", "save_to_disk", "hf-json", "hf-parquet")


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_folder(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write each relative path's text (or bytes) under `root`, creating folders; return `root`."""
    for relpath, content in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def write_source(fmt: str, rows: list[dict[str, Any]], directory: Path, stem: str = "data") -> dict[str, Any]:
    """Write `rows` in format `fmt` under `directory`; return the spec fields that name the source."""
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        return {"path": str(write_jsonl(directory / f"{stem}.jsonl", rows))}
    if fmt == "json-array":
        path = directory / f"{stem}.json"
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        return {"path": str(path)}
    if fmt == "parquet":
        path = directory / f"{stem}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        return {"path": str(path)}
    if fmt == "save_to_disk":
        path = directory / stem
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
        return {"path": str(path)}
    if fmt == "hf-json":
        return {"hf_name": "json", "data_files": str(write_jsonl(directory / f"{stem}.jsonl", rows)), "split": "train"}
    if fmt == "hf-parquet":
        path = directory / f"{stem}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        return {"hf_name": "parquet", "data_files": [str(path)], "split": "train"}
    raise ValueError(fmt)
