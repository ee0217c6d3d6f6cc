"""Reports rebuilt from run folders: tool-call statistics, retrieval quality, and runs compared side by side."""

from rollout.errors import NotARunFolderError, ReportError
from rollout.jsonl import read_jsonl
from rollout.report.calls import load_calls, run_mode
from rollout.report.tool_stats import build_tool_report, retrieval_calls, write_tool_report

__all__ = [
    "NotARunFolderError",
    "ReportError",
    "build_tool_report",
    "load_calls",
    "read_jsonl",
    "retrieval_calls",
    "run_mode",
    "write_tool_report",
]
