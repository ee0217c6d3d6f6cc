"""Errors of the report commands: one line for the user, exit code 2."""

from __future__ import annotations

from rollout.errors import RolloutError


class ReportError(RolloutError):
    """A report could not be built from the folder given."""


class NotARunFolderError(ReportError):
    """The path is not a run folder (missing, or without `tool_stats/`)."""
