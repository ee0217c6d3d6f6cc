"""Scorers the tests name in `scoring.scorers`, one per way a scorer can answer."""

from __future__ import annotations

from typing import Any

NOT_A_FUNCTION = 3


def answer_length(task: dict[str, Any]) -> int:
    """A number: the metric is named after the function."""
    return len(task["prediction"].split())


def paris_checks(task: dict[str, Any]) -> dict[str, float | None] | None:
    """A dict of metrics; None for questions without gold answers."""
    if not task["golden_answers"]:
        return None
    said = "paris" in task["prediction"].lower()
    return {"says_paris": float(said), "tool_free": float(not task["tool_calls"]) if said else None}


def broken(task: dict[str, Any]) -> float:
    raise KeyError("citations")


def wordy(task: dict[str, Any]) -> str:
    return "long"
