"""Typed records the client side of MCP hands to agents and to the trajectory."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rollout.wire import Outcome


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What an agent sees after calling a tool."""

    ok: bool
    """False when the tool reported an error (the agent may retry or go on)."""
    text: str
    """The tool's text content, joined; the error message when not ok."""
    structured: dict[str, Any] | None = None
    """The tool's structured content, when it returns one."""


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tools/call as the client saw it; stored in trajectory.jsonl."""

    call_id: str
    """Id sent in the request `_meta`; the gateway's stats record carries the same id."""
    name: str
    """Tool name."""
    arguments: dict[str, Any]
    """Arguments as the agent gave them."""
    ok: bool
    """True when the tool answered without error."""
    outcome: Outcome
    """Category of the result (`rollout.wire.Outcome`), the same word the gateway's ledger records."""
    error: str | None
    """Error text when not ok."""
    started: float
    """Unix time the request was sent."""
    latency_ms: float
    """Round-trip time seen by the client."""
    result_ids: list[str]
    """Passage ids a retrieval tool returned, best first (empty otherwise)."""
    result_doc_ids: list[str]
    """Their source document ids (equal to the passage ids unless documents were chunked)."""
    reached_gateway: bool
    """False when the environment refused the call locally (tool not offered in this mode)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
