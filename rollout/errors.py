"""Errors a user can act on. Each message names the problem and the fix."""

from __future__ import annotations


class RolloutError(Exception):
    """Base for failures reported to the user as one line (exit code 2), not a traceback."""


class ConfigError(RolloutError):
    """The run's configuration or a file it names is wrong."""


class GatewayError(RolloutError):
    """The MCP gateway could not be started, reached, or answered wrongly."""


class LLMError(RolloutError):
    """A language-model endpoint could not be reached or refused the request."""


class RunInterrupted(RolloutError):
    """The user stopped the run (Ctrl-C); what finished is saved and the run can be resumed."""
