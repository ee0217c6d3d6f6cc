"""The web viewer's index of a trajectory: a few fields and the byte offset of each task, built once.

A run can hold 100,000 tasks whose lines carry whole conversations. The run page needs a few fields
per task (to filter, sort and count) and the task page one line: so the trajectory is read once,
each task's fields are kept in columns with the offset and length of its line, and the index is
cached beside the run (`INDEX_FILE`). Later reads load the cache and read only the bytes the
driver appended since (a live run); a file that shrank or whose first line changed (a run started
over in the folder) is indexed again from the start.

Which record stands for a task: the first line of each (id, repeat), as scoring and `report
compare` keep it (a resumed run keeps one line per task; a second one is stale). Per-task scores
are `rollout.report.scoring.score_task`'s, so the page agrees with the run's evaluation summary.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import sys
import tempfile
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rollout.errors import ViewError
from rollout.records import TaskResult
from rollout.report.scoring import score_task
from rollout.run_folder import LARGE_FIELDS, TRAJECTORY_FILE

logger = logging.getLogger(__name__)

INDEX_FILE = ".view-index.json"
"""The cached index, beside trajectory.jsonl; safe to delete (it is rebuilt)."""
FORMAT = 4
"""Bumped when the columns or their encoding change, so an older cache is rebuilt rather than misread (3: packed
columns, `_pack`; 4: `out_of_context`)."""
TEXT_CHARS = 240
"""Question, prediction and gold are kept this long in the index (the task page reads them whole)."""
HEAD_BYTES = 4096
"""The start of the file whose hash tells a run that started over from one that grew."""
MAX_PROBLEMS = 20
"""Lines that are not task records: how many are named on the run page (all are counted)."""
CATEGORICAL = ("status", "tools")
"""Columns of a few distinct strings whatever the run's size: cached as codes into their distinct values."""
_T = TypeVar("_T")

COLUMNS = (
    "offset", "length", "id", "repeat", "status", "em", "f1", "recall", "question", "prediction", "gold",
    "calls", "failed_calls", "tools", "tokens", "cost", "latency_s", "llm_s", "tool_s", "waiting_s",
    "truncated", "out_of_turns", "out_of_context", "finished",
)
"""One list per column, one entry per task, in file order. `em`/`f1`/`recall` are None for a task that is
not scored (it failed) or, for recall, has no gold passages; `tools` the distinct tool names it called,
comma-joined; `tokens`/`cost` None when the endpoint reported none; `finished` the Unix time of its last
event (None without events)."""


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _head_hash(file: Path) -> str:
    with file.open("rb") as f:
        return hashlib.sha1(f.read(HEAD_BYTES)).hexdigest()


def _row(data: dict[str, Any]) -> dict[str, Any]:
    """The index's fields of one trajectory line (parsed); TypeError/ValueError when it is not a task."""
    events = data.get("events") or []
    finished = events[-1].get("t") if events and isinstance(events[-1], dict) else None
    for key in LARGE_FIELDS:
        data.pop(key, None)
    task = TaskResult.from_json(data)
    s = score_task(task)
    acc = task.accounting
    return {
        "id": task.id, "repeat": task.repeat, "status": task.status,
        "em": s["exact_match"], "f1": s["f1"], "recall": s["retrieval_recall"],
        "question": clip(" ".join(task.question.split())),
        "prediction": clip(" ".join((task.prediction or "").split())),
        "gold": clip(" | ".join(map(str, task.golden_answers))),
        "calls": len(task.tool_calls), "failed_calls": sum(not c.ok for c in task.tool_calls),
        "tools": ",".join(dict.fromkeys(c.name for c in task.tool_calls)),
        "tokens": s["total_tokens"], "cost": s["cost_usd"], "latency_s": round(float(task.latency_s), 4),
        "llm_s": None if acc is None else round(acc.llm_s, 4),
        "tool_s": None if acc is None else round(acc.tool_total_s, 4),
        "waiting_s": None if acc is None else round(acc.waiting_s, 4),
        "truncated": bool(task.truncated), "out_of_turns": bool(task.out_of_turns),
        "out_of_context": bool(task.out_of_context), "finished": finished,
    }


@dataclass
class TrajectoryIndex:
    """The index of one trajectory file; `TrajectoryIndex.load(file)` builds, extends or reads it."""

    file: Path
    columns: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    size: int = 0
    """Bytes of the file indexed: up to the end of its last complete line."""
    lines: int = 0
    """Lines read so far (blank ones included), so a line's number can be named."""
    head: str = ""
    duplicates: int = 0
    """Lines repeating an (id, repeat) seen before: left out."""
    problems: list[str] = field(default_factory=list)
    """'file:line: what is wrong' for the first `MAX_PROBLEMS` lines that are not task records."""
    skipped: int = 0
    """Every line that is not a task record."""
    _keys: dict[tuple[str, int], int] | None = field(default=None, repr=False)
    """(id, repeat) → row, built when first asked for: the run page never needs it."""
    _repeats: tuple[int, dict[str, list[int]]] | None = field(default=None, repr=False)
    _memo: dict[str, tuple[tuple[int, int, str], Any]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.columns["id"])

    def position(self, task_id: str, repeat: int = 0) -> int | None:
        """The row of a task, or None."""
        return self._key_map().get((task_id, repeat))

    def repeats_of(self, task_id: str) -> list[int]:
        """The repeats of a question this run holds, in file order."""
        return self._repeat_map().get(task_id, [])

    def _repeat_map(self) -> dict[str, list[int]]:
        if self._repeats is None or self._repeats[0] != len(self):
            by_id: dict[str, list[int]] = {}
            for i, r in self._key_map():
                by_id.setdefault(i, []).append(r)
            self._repeats = (len(self), by_id)
        return self._repeats[1]

    def memo(self, name: str, compute: Callable[[], _T]) -> _T:
        """`compute()`, computed again only once the index changed (it grew, or the run started over): what the pages
        compute over every task (the run's summary, a column's sort order)."""
        state = (len(self), self.size, self.head)
        kept = self._memo.get(name)
        if kept is None or kept[0] != state:
            kept = self._memo[name] = (state, compute())
        return kept[1]

    def _key_map(self) -> dict[tuple[str, int], int]:
        if self._keys is None:
            self._keys = dict(zip(zip(self.columns["id"], self.columns["repeat"], strict=True), range(len(self))))
        return self._keys

    def read_record(self, i: int) -> dict[str, Any]:
        """Row `i`'s whole trajectory line, read at its offset."""
        with self.file.open("rb") as f:
            f.seek(self.columns["offset"][i])
            raw = f.read(self.columns["length"][i])
        return json.loads(raw)

    def read_task(self, i: int, record: dict[str, Any] | None = None) -> TaskResult:
        """Row `i`'s task, from its `record` when the caller has read it already."""
        try:
            return TaskResult.from_json(self.read_record(i) if record is None else record)
        except (TypeError, ValueError) as e:
            raise ViewError(f"{self.file}: task {self.columns['id'][i]!r} is not a readable record ({e})") from None

    # --- building -------------------------------------------------------------------------------

    @classmethod
    def load(cls, file: Path, *, cache: bool = True) -> TrajectoryIndex:
        """The index of `file`, from its cache when that still describes the file, extended to its end."""
        index = cls._from_cache(file) if cache else None
        if index is None:
            index = cls(file=file)
        index.refresh(save=cache)
        return index

    def refresh(self, *, save: bool = True) -> int:
        """Index the lines appended since the last look; returns how many tasks were added. A file that
        shrank or starts differently is indexed from its start again."""
        try:
            size = self.file.stat().st_size
        except FileNotFoundError:
            raise ViewError(f"{self.file}: no such file (was the run folder moved?)") from None
        if size < self.size or (self.size and _head_hash(self.file) != self.head):
            logger.info("%s changed from its start (the run started over): indexing it again", self.file)
            self.__init__(file=self.file)  # type: ignore[misc]
        if size == self.size:
            return 0
        before = len(self)
        with self.file.open("rb") as f:
            f.seek(self.size)
            offset = self.size
            for raw in f:
                if not raw.endswith(b"\n"):  # the driver is still writing this line
                    break
                self.lines += 1
                if raw.strip():
                    self._add(raw, offset)
                offset += len(raw)
        self.size = offset
        if not self.head:
            self.head = _head_hash(self.file)
        added = len(self) - before
        if save and added:
            self._save()
        return added

    def _add(self, raw: bytes, offset: int) -> None:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or "id" not in data:
                raise ValueError("not a task record (a JSON object with an 'id')")
            row = _row(data)
        except (ValueError, TypeError, AttributeError) as e:
            self.skipped += 1
            if len(self.problems) < MAX_PROBLEMS:
                self.problems.append(f"{self.file}:{self.lines}: {e}")
            return
        key = (row["id"], row["repeat"])
        keys = self._key_map()
        if key in keys:
            self.duplicates += 1
            return
        keys[key] = len(self)
        row["offset"], row["length"] = offset, len(raw)
        for c in COLUMNS:
            self.columns[c].append(row[c])

    # --- the cache ------------------------------------------------------------------------------

    @property
    def cache_path(self) -> Path:
        return self.file.with_name(INDEX_FILE) if self.file.name == TRAJECTORY_FILE else self.file.with_suffix(".view-index.json")

    def _save(self) -> None:
        """Write the cache atomically; a folder the viewer may not write to only costs the next start a rebuild."""
        state = {"format": FORMAT, "size": self.size, "lines": self.lines, "head": self.head,
                 "duplicates": self.duplicates, "skipped": self.skipped, "problems": self.problems,
                 "columns": {c: _pack(c, values) for c, values in self.columns.items()}}
        try:
            fd, tmp = tempfile.mkstemp(prefix=".view-index-", dir=self.cache_path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                # One `dumps` (C-encoded) and one write: `json.dump` encodes in Python, piece by piece (seconds here).
                f.write(json.dumps(state, ensure_ascii=False, separators=(",", ":")))
            os.replace(tmp, self.cache_path)
        except OSError as e:
            logger.debug("could not cache the index at %s (%s); it is kept in memory", self.cache_path, e)

    @classmethod
    def _from_cache(cls, file: Path) -> TrajectoryIndex | None:
        path = cls(file=file).cache_path
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            if state.get("format") != FORMAT or set(state["columns"]) != set(COLUMNS):
                return None
            columns = {c: _unpack(stored) for c, stored in state["columns"].items()}
            index = cls(file=file, columns=columns, size=int(state["size"]), lines=int(state["lines"]),
                        head=str(state["head"]), duplicates=int(state["duplicates"]), skipped=int(state["skipped"]),
                        problems=list(state["problems"]))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None  # no cache, or one this version cannot read: build it
        lengths = {len(v) for v in index.columns.values()}
        if len(lengths) != 1:
            return None
        return index


# --- packed columns -------------------------------------------------------------------------------
# Parsing 100,000 floats or ints from JSON text costs tens of ms a column, half a second for the whole cache; their
# 8-byte values, base64 in the JSON, load in a few ms and come back bit for bit. A column is packed only when every
# value is a float (or every one an int within 64 bits), None aside; anything else stays a JSON list.


def _array(typecode: str, data: bytes = b"") -> array[Any]:
    """An array of 8-byte values, little-endian on disk whatever the machine."""
    packed = array(typecode)
    if packed.itemsize != 8:
        raise ValueError(f"array({typecode!r}) items are {packed.itemsize} bytes here, not 8")
    packed.frombytes(data)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed


def _pack(name: str, values: list[Any]) -> Any:
    """A column as the cache stores it: {"f8"|"i8": base64 of its values, "none": rows that are None}, {"values":
    distinct strings, "codes": base64 of each row's} for `CATEGORICAL`, else the list itself."""
    kinds = set(map(type, values)) - {type(None)}
    if name in CATEGORICAL and kinds == {str}:
        distinct = list(dict.fromkeys(values))
        code = {v: n for n, v in enumerate(distinct)}
        return {"values": distinct, "codes": _b64(_array("q"), [code[v] for v in values])}
    if kinds == {float}:
        return {"f8": _b64(_array("d"), [0.0 if v is None else v for v in values]), "none": _nones(values)}
    if kinds == {int} and all(-(1 << 63) <= v < 1 << 63 for v in values if v is not None):
        return {"i8": _b64(_array("q"), [0 if v is None else v for v in values]), "none": _nones(values)}
    return values


def _nones(values: list[Any]) -> list[int]:
    return [i for i, v in enumerate(values) if v is None]


def _b64(packed: array[Any], values: list[Any]) -> str:
    packed.extend(values)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack(stored: Any) -> list[Any]:
    """A column from `_pack`'s form; ValueError, TypeError, KeyError or IndexError when it is not one."""
    if isinstance(stored, list):
        return stored
    if not isinstance(stored, dict):
        raise TypeError(f"a cached column is a list or an object, not {type(stored).__name__}")
    if "codes" in stored:
        distinct = list(stored["values"])
        codes = _array("q", base64.b64decode(stored["codes"], validate=True)).tolist()
        if codes and min(codes) < 0:
            raise ValueError("a negative code")
        return [distinct[c] for c in codes]
    typecode = "d" if "f8" in stored else "q"
    values = _array(typecode, base64.b64decode(stored["f8" if typecode == "d" else "i8"], validate=True)).tolist()
    nones = list(stored["none"])
    if nones and min(nones) < 0:
        raise ValueError("a negative row")
    for i in nones:
        values[i] = None
    return values
