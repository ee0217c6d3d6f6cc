"""Reports rebuilt from run folders: tool-call statistics, retrieval quality, runs compared side by side, and runs
scored again with their scores files (`scores/*.jsonl`).

The names below are loaded when first used: the tool report needs pandas, which a run's driver (it scores and
prints its summary without it) should not import before its summary is on screen.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "NotARunFolderError": "rollout.errors",
    "ReportError": "rollout.errors",
    "read_jsonl": "rollout.jsonl",
    "load_calls": "rollout.report.tool_calls.ledger",
    "run_mode": "rollout.report.tool_calls.ledger",
    "ExtraScores": "rollout.report.extra_scores",
    "ScoreRow": "rollout.report.extra_scores",
    "read_scores": "rollout.report.extra_scores",
    "write_scores": "rollout.report.extra_scores",
    "rescore": "rollout.report.rescore",
    "build_tool_report": "rollout.report.tool_calls.report",
    "retrieval_calls": "rollout.report.tool_calls.report",
    "write_tool_report": "rollout.report.tool_calls.report",
}

__all__ = [
    "ExtraScores",
    "NotARunFolderError",
    "ReportError",
    "ScoreRow",
    "build_tool_report",
    "load_calls",
    "read_jsonl",
    "read_scores",
    "rescore",
    "retrieval_calls",
    "run_mode",
    "write_scores",
    "write_tool_report",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
