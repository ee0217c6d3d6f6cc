"""Running aggregates that score a run in one pass, in memory that does not grow with its tasks.

A run of a million tasks is scored from its trajectory file record by record; what is kept is a few
numbers per metric and per slice (a repeat, a hop count, a question style), never the records.

- `ExactSum` adds floats without rounding error (Shewchuk's partial sums, the algorithm behind
  `math.fsum`), so a mean is the correctly rounded mean of the values whatever the order the tasks
  finished in; a pandas or numpy sum rounds at every step and could differ in the last bit between two
  orders of the same records.
- `Slice` is the metrics of some scored records; `Grouped` keeps one per value of a metadata key.
- `CorrectPerQuestion` keeps, for pass@k, 9 bytes per scored record: a 64-bit hash of the question id
  and whether the answer was exact. Records of one question are grouped by sorting the hashes at the
  end; two different ids with the same hash (odds about n^2 / 2^65, 3e-8 for a million questions) would
  merge their counts for pass@k only.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from rollout.summary import GroupScores, Metrics


class ExactSum:
    """The exact sum (and count) of the floats added; `mean()` rounds once, at the end."""

    __slots__ = ("_partials", "count")

    def __init__(self) -> None:
        self._partials: list[float] = []
        self.count = 0

    def add(self, x: float) -> None:
        # Shewchuk's msum: `_partials` are non-overlapping floats whose exact sum is the exact running sum.
        self.count += 1
        x = float(x)
        i = 0
        for y in self._partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                self._partials[i] = lo
                i += 1
            x = hi
        self._partials[i:] = [x]

    def merge(self, other: ExactSum) -> None:
        for x in other._partials:
            self.add(x)
        self.count += other.count - len(other._partials)

    def total(self) -> float:
        return math.fsum(self._partials)

    def mean(self) -> float | None:
        return self.total() / self.count if self.count else None


class Slice:
    """How many scored records a slice has, and the exact sum of each metric's values (None skipped)."""

    __slots__ = ("n", "sums")

    def __init__(self, metrics: tuple[str, ...]) -> None:
        self.n = 0
        self.sums = {m: ExactSum() for m in metrics}

    def add(self, row: Mapping[str, Any]) -> None:
        self.n += 1
        for m, s in self.sums.items():
            if (v := row[m]) is not None:
                s.add(v)

    def merge(self, other: Slice) -> None:
        self.n += other.n
        for m, s in self.sums.items():
            s.merge(other.sums[m])

    def means(self) -> dict[str, float | None]:
        """Each metric's unrounded mean (None when no record has a value)."""
        return {m: s.mean() for m, s in self.sums.items()}

    def metrics(self) -> Metrics:
        return {m: None if v is None else round(v, 4) for m, v in self.means().items()}

    def scores(self) -> GroupScores:
        return GroupScores(self.n, self.metrics())


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Grouped:
    """Scored records sliced by one metadata value (`hops`, `style`), labelled as the summary has always
    labelled them: `str(value)`, except that a key whose values are all numbers is a float column once
    some record lacks it or holds a float, and then every label is the float's (`"1.0"`, not `"1"`).
    Records without the value join no slice."""

    def __init__(self, metrics: tuple[str, ...]) -> None:
        self._metrics = metrics
        self._slices: dict[tuple[bool, str], Slice] = {}
        """(value is a number, str(value)) → its slice; numbers keep their value's text until `groups`."""
        self._numbers_only = True
        self._float_column = False

    def see(self, value: Any) -> None:
        """Note a record's value, scored or not: every record decides how the column's labels read."""
        if _is_missing(value):
            self._float_column = True
        elif not _is_number(value):
            self._numbers_only = False
        elif isinstance(value, float):
            self._float_column = True

    def add(self, value: Any, row: Mapping[str, Any]) -> None:
        """Add a scored record (after `see`)."""
        if _is_missing(value):
            return
        key = (_is_number(value), str(value))
        if (s := self._slices.get(key)) is None:
            s = self._slices[key] = Slice(self._metrics)
        s.add(row)

    def groups(self) -> dict[str, GroupScores] | None:
        """Per label, sorted by label; None when no scored record has the value."""
        if not self._slices:
            return None
        as_float = self._numbers_only and self._float_column
        merged: dict[str, Slice] = {}
        for (number, text), s in self._slices.items():
            label = str(float(text)) if number and as_float else text
            if label in merged:
                merged[label].merge(s)
            else:
                merged[label] = s
        return {label: merged[label].scores() for label in sorted(merged)}


class CorrectPerQuestion:
    """For pass@k: per scored record, its question (hashed to 64 bits) and whether it was exactly right."""

    def __init__(self) -> None:
        self._keys = array("Q")
        self._right = bytearray()

    def add(self, question_id: str, exact_match: float | None) -> None:
        self._keys.append(int.from_bytes(hashlib.blake2b(question_id.encode(), digest_size=8).digest(), "little"))
        self._right.append(exact_match == 1.0)

    def tries_and_right(self) -> Counter[tuple[int, int]]:
        """How many questions had each (scored records n, exactly right c)."""
        keys = np.frombuffer(self._keys, dtype=np.uint64) if len(self._keys) else np.zeros(0, np.uint64)
        right = np.frombuffer(bytes(self._right), dtype=np.uint8)
        order = np.argsort(keys, kind="stable")
        _, starts, sizes = np.unique(keys[order], return_index=True, return_counts=True)
        correct = np.add.reduceat(right[order].astype(np.int64), starts) if len(starts) else np.zeros(0, np.int64)
        return Counter(zip(sizes.tolist(), correct.tolist(), strict=True))
