"""Calibration: do the confidences the answers state match how often they are right?

BrowseComp's answer format ends the final message with

    Explanation: ...
    Exact Answer: Kremes Works
    Confidence: 85%

`stated_confidence` reads that last line from the task's final assistant message (else its prediction):
- `Confidence: 85%`, `**Confidence:** 85 %`, `confidence: 85` are percents (a number without `%` is a percent);
- `Confidence: 0.85` is a fraction: a number below or at 1 written with a decimal point (so `Confidence: 1`
  is 1%, `Confidence: 1.0` is 100%);
- above 100% reads as 100%; the last such line of the message counts; a message without one states none.

A BrowseComp judge extracts that confidence itself (its `confidence` metric): when a run has it, it is the one
used, as BrowseComp-Plus uses its judge's (`task_confidence`).

`CalibrationTally` bins the scored records that state a confidence into 10 equal bins of [0, 1] (a confidence of
1.0 joins the last) and reports the expected calibration error: the sum over bins of (bin size / n) * |mean
confidence - accuracy| (L1). Beside it, with at least 100 such records, BrowseComp-Plus' own number
(`browsecomp_plus_error`, its `calib_err` in `scripts_evaluation/evaluate_run.py`, after Hendrycks et al.): the records
sorted by confidence, cut into bins of 100 (the last bin taking the rest), and the root of the mean squared gap
between each bin's mean confidence and accuracy, weighted by bin size; as there, the last bin is left out of the
sum. It sorts as that script does, with numpy's default `argsort` (not stable) on the confidences in the order the
records come: answers with equal confidences fall into bins as they fall there. Correctness is the `judge_correct`
metric when a scores file provides it, else exact match. The 10 bins are exact sums; the BrowseComp-Plus number
keeps 9 bytes per record that states a confidence.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rollout.benchmark_scores import Calibration, CalibrationBin
from rollout.report.judge.presets import JUDGE_CONFIDENCE, JUDGE_CORRECT
from rollout.report.running import ExactSum

BINS = 10
"""Equal-width bins over [0, 1]."""
BROWSECOMP_PLUS_BIN = 100
"""BrowseComp-Plus' bin size (`beta`), and the fewest answers it computes its calibration error from."""

_CONFIDENCE = re.compile(r"\bconfidence\s*\**\s*:\s*\**\s*(\d+(?:\.\d+)?)\s*(%?)", re.IGNORECASE)


def parse_confidence(text: str) -> float | None:
    """The confidence the text states last, as a fraction of 1 (None when it states none); see the module."""
    matches = _CONFIDENCE.findall(text or "")
    if not matches:
        return None
    number, percent = matches[-1]
    value = float(number)
    if not percent and "." in number and value <= 1.0:
        return value
    return min(value, 100.0) / 100.0


def final_message(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The content of the last assistant message (text parts joined), or None without one."""
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        if content:
            return str(content)
    return None


def stated_confidence(messages: Sequence[Mapping[str, Any]], prediction: str) -> float | None:
    """The confidence a task's answer states: from its final assistant message, else from its prediction."""
    final = final_message(messages)
    confidence = parse_confidence(final) if final is not None else None
    return confidence if confidence is not None else parse_confidence(prediction)


def task_confidence(metrics: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], prediction: str) -> float | None:
    """A task's confidence: the judge's reading of it (`metrics["confidence"]`) when there is one, else what its
    final message states."""
    judged = metrics.get(JUDGE_CONFIDENCE)
    return float(judged) if judged is not None else stated_confidence(messages, prediction)


def browsecomp_plus_error(confidence: Sequence[float], correct: Sequence[float],
                          beta: int = BROWSECOMP_PLUS_BIN) -> float | None:
    """BrowseComp-Plus' calibration error (see the module docstring), as a fraction; None under `beta` answers."""
    if len(confidence) < beta:
        return None
    conf = np.asarray(confidence, dtype=np.float64)
    # Its `calib_err` sorts with numpy's default argsort, which is not stable: among equal confidences (judges give
    # round percents) it decides which answers share the bin at a cut. The same call on the same float64 array in
    # the same order leaves them where its evaluator's does; a stable sort would not.
    order = np.argsort(conf)
    conf = conf[order]
    right = np.asarray(correct, dtype=np.float64)[order]
    starts = list(range(0, len(conf) // beta * beta, beta))
    total = 0.0
    for start in starts[:-1]:  # the last bin (which takes the rest) is not summed there either
        stop = start + beta
        total += (stop - start) / len(conf) * float(conf[start:stop].mean() - right[start:stop].mean()) ** 2
    return math.sqrt(total)


def correctness_metric(metrics: Sequence[str]) -> str:
    """Which metric says an answer is right: `judge_correct` when the run has it, else exact match."""
    return JUDGE_CORRECT if JUDGE_CORRECT in metrics else "exact_match"


def _bin(confidence: float) -> int:
    # From the percent rounded to 1e-6: 0.7 * 10 is 7.000000000000001, and 70 // 10 is exactly 7.
    return min(int(round(confidence * 100, 6) // (100 // BINS)), BINS - 1)


class CalibrationTally:
    """Stated confidences and correctness, added record by record, binned as they come."""

    def __init__(self, correct_by: str) -> None:
        self.correct_by = correct_by
        self._confidence = [ExactSum() for _ in range(BINS)]
        self._correct = [ExactSum() for _ in range(BINS)]
        self._each = array("d")  # float64: the very values its evaluator sorts, so ties and order are its own
        self._each_right = array("b")

    def add(self, confidence: float | None, correct: float | None) -> None:
        """A scored record; one that states no confidence or whose correctness is unknown is left out."""
        if confidence is None or correct is None:
            return
        b = _bin(confidence)
        self._confidence[b].add(confidence)
        self._correct[b].add(float(correct))
        self._each.append(confidence)
        self._each_right.append(1 if correct >= 0.5 else 0)

    def summary(self) -> Calibration | None:
        """The calibration of the records added; None when none stated a confidence."""
        n = sum(s.count for s in self._confidence)
        if not n:
            return None
        bins, error = [], 0.0
        for b, (confidence, correct) in enumerate(zip(self._confidence, self._correct, strict=True)):
            if not confidence.count:
                continue
            mean_confidence, accuracy = confidence.total() / confidence.count, correct.total() / correct.count
            error += confidence.count / n * abs(mean_confidence - accuracy)
            bins.append(CalibrationBin(low=b / BINS, high=(b + 1) / BINS, n=confidence.count,
                                       confidence=round(mean_confidence, 4), accuracy=round(accuracy, 4)))
        plus = browsecomp_plus_error(self._each, self._each_right)
        return Calibration(
            n=n, error=round(error, 4), correct_by=self.correct_by,
            browsecomp_plus_error=None if plus is None else round(plus, 4),
            confidence=round(math.fsum(s.total() for s in self._confidence) / n, 4),
            accuracy=round(math.fsum(s.total() for s in self._correct) / n, 4), bins=bins,
        )


def calibration_line(c: Calibration) -> str:
    """E.g. "Calibration (judge_correct): error 0.300 over 6 answers stating a confidence (mean 63%, right 33%)"."""
    plus = ("" if c.browsecomp_plus_error is None
            else f"; BrowseComp-Plus' calibration error {100 * c.browsecomp_plus_error:.2f}%")
    return (f"Calibration ({c.correct_by}): error {c.error:.3f} over {c.n} answers stating a confidence "
            f"(mean {100 * c.confidence:.0f}%, right {100 * c.accuracy:.0f}%){plus}")
