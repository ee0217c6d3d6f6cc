"""Every error the project raises for a user to act on, in one place. Each message names the problem and the fix."""

from __future__ import annotations

from collections.abc import Iterable


class RolloutError(Exception):
    """Base for failures reported to the user as one line (exit code 2), not a traceback."""


class ConfigError(RolloutError):
    """The run's configuration or a file it names is wrong."""


class GatewayError(RolloutError):
    """The MCP gateway could not be started, reached, or answered wrongly."""


class LLMError(RolloutError):
    """A language-model endpoint could not be reached or refused the request."""


class ContextWindowExceeded(LLMError):
    """The conversation no longer fits the model's context window: the server refused it, or `llm.context_window`
    showed it could not fit before it was sent. The task ends as the agent's outcome (`out_of_context`), not as an
    error; the message is the server's own (or the check's)."""


class UnreadableToolCall(LLMError):
    """The server could not read the tool call the model wrote and answered with an error in place of the reply
    (llama-server: HTTP 500 "Failed to parse tool call arguments as JSON"). The reply is lost with it, so the task
    ends there as the agent's outcome (`unreadable_call`), scored with no answer; the message is the server's own.
    Not retried: at temperature 0 the same call comes back, and above it a retry would keep only the lucky samples."""


class ServerSetupError(LLMError):
    """The LLM server is set up so that no task can mean anything (it writes tool calls as text: no tool parser).
    A task that meets it stops the whole run (exit 2) instead of failing on its own."""


class RunInterrupted(RolloutError):
    """The user stopped the run (Ctrl-C); what finished is saved and the run can be resumed."""


class DataError(RolloutError):
    """A corpus or question file cannot be used; the message names the file and the expected format."""


class RetrievalError(RolloutError):
    """Base class for failures while building, loading or querying an index."""


class ReportError(RolloutError):
    """A report could not be built from the folder given."""


class NotARunFolderError(ReportError):
    """The path is not a run folder (missing, or without `tool_stats/`)."""


class RunFolderBusy(RolloutError):
    """Another driver is writing into this run folder."""


class ViewError(RolloutError):
    """The path or a line of the trajectory cannot be shown: one line for the user, exit code 2."""


class ExportError(RolloutError):
    """A run folder or question set cannot be exported as training rows as asked: one line, exit code 2."""


class EpisodeError(RolloutError):
    """An OpenEnv client's action cannot be taken now (no episode yet, the episode has ended, an unknown question):
    it is answered with the message and the episode, if any, goes on (`rollout env`)."""


class UnknownToolGroupError(ConfigError):
    """A gateway file names a tool group that no tool registers."""

    def __init__(self, group: str, known: Iterable[str]):
        known_list = ", ".join(sorted(known)) or "(none)"
        super().__init__(
            f"unknown tool group {group!r}: no tool registers it. Registered groups: {known_list}. "
            "Fix the gateway file's tool_groups."
        )
        self.group = group


class SchemaError(ValueError):
    """A tool schema cannot be converted for function calling (e.g. a reference that points nowhere)."""
