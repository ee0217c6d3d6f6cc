"""Reports rebuilt from run folders: tool-call statistics, retrieval quality, runs compared side by side, and runs
scored again with their scores files (`scores/*.jsonl`)."""

from rollout.errors import NotARunFolderError, ReportError
from rollout.jsonl import read_jsonl
from rollout.report.calls import load_calls, run_mode
from rollout.report.extra_scores import ExtraScores, ScoreRow, read_scores, write_scores
from rollout.report.rescore import rescore
from rollout.report.tool_stats import build_tool_report, retrieval_calls, write_tool_report

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
