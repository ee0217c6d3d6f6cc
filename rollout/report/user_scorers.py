"""Scorers of the user's own: functions named in `scoring.scorers` that score each task beside the built-in metrics.

A scorer is named `package.module:function` (or `package.module.function`) and importable from the run's Python.
It takes one task record, the trajectory line as a dict (`TaskResult.to_json()`: id, question, golden_answers,
prediction, tool_calls, messages, metadata, ...), and returns

- a number: the metric is named after the function (`cited_docs`);
- a dict of numbers (or None) by metric name: each key is a metric;
- None: the scorer does not apply to this task (it counts in no mean).

Only scored tasks are given to scorers (status ok, or every task with `score_failed`). Their values go to
`scores/user.jsonl` (`rollout.report.extra_scores`), where the summary, `report compare` and the viewer read them
like any extra metric. A scorer that cannot be imported is a `ConfigError` when the run starts; one that raises or
returns something else is a `ReportError` naming it and the task.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rollout.errors import ConfigError, ReportError
from rollout.report.extra_scores import ScoreRow

USER_SCORES = "user"
"""The scores file of the run's own scorers: `scores/user.jsonl`."""
_FORMAT = "'package.module:function'"


@dataclass(frozen=True, slots=True)
class Scorer:
    """One loaded scorer."""

    spec: str
    """As configured, e.g. `my_pkg.scoring:cited_docs`."""
    name: str
    """The function's name: the metric of a scorer that returns a number."""
    fn: Callable[[dict[str, Any]], Any]

    def score(self, record: dict[str, Any]) -> dict[str, float | None]:
        """The scorer's metrics of one task record; a `ReportError` naming the scorer and the task when it raises
        or returns something that is not a number, a dict of numbers, or None."""
        where = f"scorer {self.spec} on task {record.get('id')!r} (repeat {record.get('repeat', 0)})"
        try:
            value = self.fn(record)
        except Exception as e:  # noqa: BLE001 - any failure of user code becomes one line naming it
            raise ReportError(f"{where} raised {type(e).__name__}: {e}. Fix the scorer (return None for tasks it "
                              "does not apply to), then `rollout report rescore RUN`") from e
        if value is None:
            return {}
        if isinstance(value, dict):
            return {str(k): _number(v, f"{where} returned {{{k!r}: {v!r}}}") for k, v in value.items()}
        return {self.name: _number(value, f"{where} returned {value!r}")}


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(value):  # bools are numbers too: True is 1
        return float(value)
    raise ReportError(f"{where} ({type(value).__name__}); a scorer returns a number, a dict of numbers by metric "
                      "name, or None")


def load_scorer(spec: str) -> Scorer:
    """The scorer `spec` names; a `ConfigError` naming it and the fix when it does not import or is not callable."""
    spec = str(spec).strip()
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"scorer {spec!r}: name it {_FORMAT} in scoring.scorers, e.g. "
                          "'scoring.scorers=[rollout.report.example_scorers:gold_share]'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - ImportError, or whatever the module raises as it imports
        raise ConfigError(f"scorer {spec!r}: cannot import {module_name!r} ({type(e).__name__}: {e}); install the "
                          f"package that holds it or fix the name in scoring.scorers ({_FORMAT})") from None
    fn = getattr(module, attr, None)
    if fn is None:
        public = sorted(n for n, v in vars(module).items()
                        if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        raise ConfigError(f"scorer {spec!r}: module {module_name} has no {attr!r}; its functions: "
                          f"{', '.join(public) or '(none)'}")
    if not callable(fn):
        raise ConfigError(f"scorer {spec!r}: {module_name}.{attr} is a {type(fn).__name__}, not a function")
    return Scorer(spec=spec, name=attr, fn=fn)


def load_scorers(specs: Sequence[str]) -> list[Scorer]:
    """Every configured scorer, checked up front (the driver calls this before any task runs)."""
    return [load_scorer(s) for s in specs]


def score_records(scorers: Sequence[Scorer], records: Iterable[dict[str, Any]]) -> Iterator[ScoreRow]:
    """One row per record that some scorer gave a metric; two scorers giving one metric is a `ReportError`."""
    for record in records:
        metrics: dict[str, float | None] = {}
        by: dict[str, str] = {}
        for scorer in scorers:
            for metric, value in scorer.score(record).items():
                if metric in by:
                    raise ReportError(f"scorers {by[metric]} and {scorer.spec} both give metric {metric!r}; "
                                      "rename one of them")
                by[metric] = scorer.spec
                metrics[metric] = value
        if metrics:
            yield ScoreRow(str(record["id"]), int(record.get("repeat", 0)), metrics)
