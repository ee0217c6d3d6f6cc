"""The vocabulary the gateway and its clients share: `_meta` keys, call outcomes, result classification and ids,
the tool-set management group's name and the bearer token.

The gateway's stats middleware, the HTTP proxy, the upstream proxy, the environments (`envs/`),
the tool report and resume all import these names from here, so a call's outcome means the same
in `tool_stats/realtime_calls.jsonl` and in `trajectory.jsonl`. This module imports nothing heavy:
Ray workers and the env side read it without pulling in the server.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

# --- request `_meta` keys (client → gateway) ---------------------------------------------------
META_CALL_ID = "rollout/call_id"
"""Client-made id of one tools/call; joins a ledger record to the trajectory's call."""
META_TASK_ID = "rollout/task_id"
"""Task the call belongs to."""
META_WORKER_ID = "rollout/worker_id"
"""Rollout worker that sent the call."""
META_ATTEMPT = "rollout/attempt"
"""The task's attempt number (1 unless a worker died under an earlier attempt)."""
META_RUN_ID = "rollout/run_id"
"""Identity of the run the call belongs to (scopes per-task state on a shared gateway)."""
META_TRAFFIC = "rollout/traffic"
"""What kind of client sent the call when it is not an evaluation run: `TRAFFIC_TRAIN` for a trainer's tool calls
(`rollout.trainers`). The ledger keeps it, so training and evaluation traffic on one gateway are told apart."""
META_STEP = "rollout/step"
"""The trainer's step number when it sends one (an int); the ledger keeps it for `rollout report tool-stats`."""
TRAFFIC_TRAIN = "train"
"""`META_TRAFFIC`'s value for a trainer's calls."""
HEADER_TRAFFIC = "X-Rollout-Traffic"
"""HTTP routes' (`POST /retrieve`) form of `META_TRAFFIC`."""
HEADER_STEP = "X-Rollout-Step"
"""HTTP routes' form of `META_STEP`."""

META_TEXT = "rollout/text"
"""On a request, `TEXT_FROM_STRUCTURED`: the client makes a result's text from its structured content itself,
so the gateway may leave the text out. On a result, `TEXT_FROM_STRUCTURED`: the gateway left it out."""
TEXT_FROM_STRUCTURED = "from_structured"
"""The text of a result is its structured content as JSON indented by 2, exactly what the `mcp` SDK's server
writes as the text of a tool's structured result; `result_text` makes it from the structured content."""

# --- result `_meta` keys (gateway → client) -----------------------------------------------------
META_OUTCOME = "rollout/outcome"
"""Set on error results the gateway made itself (`timeout`, `upstream_unavailable`)."""
META_ACCOUNTING = "rollout/accounting"
"""What the call cost as the gateway measured it: `rollout.accounting.CallAccounting` as JSON (stage, context
tokens of the result text, tokens and time of the LLM calls the tool made)."""

# --- tool `_meta` keys (tools/list) -------------------------------------------------------------
META_GROUP = "rollout/group"
"""Tool group (tool set) a listed tool belongs to."""
META_RESOURCE_TYPE = "rollout/resource_type"
"""Resource type of the module that brought the tool in (`rag`, `system`, ...)."""
META_SOURCE = "rollout/source"
"""`local`, or `mcp` for a tool proxied from an upstream MCP server."""
META_UPSTREAM = "rollout/upstream"
"""URL of the upstream MCP server of a proxied tool."""
META_DEGRADED = "rollout/degraded"
"""Set on a tool the gateway serves in a lesser form than its own: why (an upstream tool whose input schema cannot
be converted for function calling is served with the plain schema `{"type": "object"}`). Runs list such tools in
`evaluation_summary.json`, the gateway's stats in `tool_stats/report.json`."""

Outcome = Literal[
    "ok",
    "tool_error",
    "invalid_arguments",
    "unknown_tool",
    "timeout",
    "upstream_unavailable",
    "protocol_error",
    "cancelled",
    "transport_error",
]
"""How one tools/call ended.

ok: the tool answered. tool_error: the tool reported an error meant for the model.
invalid_arguments: the arguments failed the tool's schema. unknown_tool: no such tool (or one the
task's tool sets do not offer). timeout: no answer in time (the gateway's `--tool-timeout-s`, or the
client's `call_timeout_s`). upstream_unavailable: the upstream MCP server of a proxied tool, or the LLM
endpoint a step tool asks (`filter_documents`, `generate_answer`), is down or refuses.
protocol_error: the gateway failed while handling the call. cancelled: the client went away
mid-call (gateway side only). transport_error: the client could not reach the gateway (client side
only: such a call has no ledger record).
"""
OUTCOMES: tuple[str, ...] = get_args(Outcome)

INFRA_OUTCOMES = frozenset({"timeout", "upstream_unavailable", "protocol_error", "cancelled", "transport_error"})
"""Outcomes that say the tool infrastructure failed, not the agent: a task with such a call did not
get the evidence it asked for, so it is recorded as `infra_error`, never as answered."""

GATEWAY_MARKED = ("timeout", "upstream_unavailable")
"""Outcomes the gateway writes into a result's `_meta[META_OUTCOME]`."""


def _field(result: Any, attr: str, key: str) -> Any:
    return result.get(key) if isinstance(result, dict) else getattr(result, attr, None)


def result_text(result: Any) -> str:
    """The text content of a tools/call result (model or wire dict), joined.

    A result the gateway sent without its text (marked `TEXT_FROM_STRUCTURED`) gets the text the gateway
    would have sent: its structured content as JSON indented by 2, as the `mcp` SDK's server writes it."""
    content = _field(result, "content", "content") or []
    if not content and (_field(result, "meta", "_meta") or {}).get(META_TEXT) == TEXT_FROM_STRUCTURED:
        structured = _field(result, "structured_content", "structuredContent")
        if structured is not None:
            return structured_text(structured)
    return "\n".join(str(_field(c, "text", "text") or "") for c in content).strip()


def structured_text(structured: Any) -> str:
    """Structured content as the text the `mcp` SDK's server sends beside it (`pydantic_core.to_json`, indent 2)."""
    import pydantic_core  # the serializer the SDK uses, so the bytes match; not at import (see the module docstring)

    return pydantic_core.to_json(structured, indent=2).decode().strip()


def classify_result(result: Any) -> tuple[bool, Outcome, str | None, list[str]]:
    """(ok, outcome, error text, `result_ids`' ids) of a tools/call result, model or wire dict."""
    if not _field(result, "is_error", "isError"):
        ids, _ = result_ids(_field(result, "structured_content", "structuredContent"))
        return True, "ok", None, ids
    text = result_text(result)
    marked = (_field(result, "meta", "_meta") or {}).get(META_OUTCOME)
    outcome: Outcome
    if marked in GATEWAY_MARKED:
        outcome = marked
    elif "validation error" in text:
        outcome = "invalid_arguments"
    elif text.startswith("Unknown tool"):
        outcome = "unknown_tool"
    else:
        outcome = "tool_error"
    return False, outcome, text, []


def is_http_url(value: object) -> bool:
    """Whether `value` is an http(s) URL, as every setting that names an endpoint or a gateway takes it."""
    return isinstance(value, str) and value.startswith(("http://", "https://"))


# --- what a result returned, and which tools are degraded ------------------------------------------

@dataclass(frozen=True, slots=True)
class Hit:
    """One item of a tool result's list, as every reader takes it: the gateway's ledger, the client's trajectory and
    the agents. Its names are those the gateway's result models publish (`PassageHit`, `DocumentHit`, `Candidate`,
    `DocumentSnippet`, the chunks, the scored documents); an upstream tool's items are read by the same names. A
    field is None where the item lacks it or holds a value of another kind: nothing is made up."""

    id: str | None
    """The item's own id (a passage's, or a document's): a non-empty string, or an integer as text."""
    doc_id: str | None
    """Its source document's id, read as `id` is."""
    title: str | None
    text: str | None
    """Its text, when it carries one as a string (passages and chunks do; documents and snippets do not)."""
    rank: int | None

    @classmethod
    def of(cls, item: dict[str, Any]) -> Hit:
        title, text, rank = item.get("title"), item.get("text"), item.get("rank")
        return cls(id=_id_value(item.get("id")), doc_id=_id_value(item.get("doc_id")),
                   title=None if title is None else str(title), text=text if isinstance(text, str) else None,
                   rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None)


def result_hits(structured: Any) -> list[Hit] | None:
    """The items a result's structured content returned, in order; None when it holds no list of them.

    The items are the list `results` (or `result`, how the `mcp` SDK wraps a tool's list output); an item that is
    not an object is passed over. Answers, charts, tool-set listings and corpus facts (`generate_answer`,
    `visualize_doc_relevance`, the tool-set tools, `get_corpus_info`) hold no list."""
    items = structured.get("results", structured.get("result")) if isinstance(structured, dict) else None
    return [Hit.of(item) for item in items if isinstance(item, dict)] if isinstance(items, list) else None


def result_ids(structured: Any) -> tuple[list[str], list[str]]:
    """(ids, document ids) of the items a successful result's structured content returned (`result_hits`), in
    order, one of each per item; both empty when it returned none. The gateway's ledger and the client's trajectory
    both read a result's ids here, so the two records of a call always agree.

    Per item shape:
    - a passage (`query_knowledge_base_*`, `recall_documents`, `chunk_documents`): `id` is the passage, `doc_id`
      its source document;
    - a document (`search_documents`, `retrieve_documents`, `search_sources`): `id` and `doc_id`, the same id;
    - a scored document (`filter_documents`: every document it scored, relevant or not): `doc_id` alone, which is
      then its id too; an item with `id` alone (an upstream tool's) likewise.
    An item that carries neither gives no id: ids are never made up."""
    ids: list[str] = []
    doc_ids: list[str] = []
    for hit in result_hits(structured) or ():
        own, doc = hit.id or hit.doc_id, hit.doc_id or hit.id
        if own is not None and doc is not None:
            ids.append(own)
            doc_ids.append(doc)
    return ids, doc_ids


def _id_value(value: Any) -> str | None:
    """An id as text: a non-empty string, or an integer; anything else is no id."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def degraded_tools(tools: Iterable[Any]) -> dict[str, str]:
    """Name → reason of the listed tools (models or wire dicts) marked `META_DEGRADED`, in listing order."""
    degraded = {}
    for tool in tools:
        reason = (_field(tool, "meta", "_meta") or {}).get(META_DEGRADED)
        if reason:
            degraded[str(_field(tool, "name", "name"))] = str(reason)
    return degraded


# --- tool groups ------------------------------------------------------------------------------------

TOOLSETS_GROUP = "toolsets"
"""The group of the three management tools; always exposed (and never a set) when dynamic."""


# --- authentication: a gateway started with a token wants it on every request ---------------------

TOKEN_ENV = "ROLLOUT_GATEWAY_TOKEN"


def resolve_token(explicit: str | None = None) -> str | None:
    """The token to use: `explicit` when given, else `$ROLLOUT_GATEWAY_TOKEN`; empty means none."""
    token = explicit if explicit is not None else os.environ.get(TOKEN_ENV)
    return token or None


def auth_headers(token: str | None) -> dict[str, str]:
    """Request headers that carry `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


MAX_DOCS_PER_CALL = 50
"""Most documents one call of a document tool returns or reads: search_documents' max_files, retrieve_documents'
and search_sources' max_docs, and doc_ids. `gateway.default_max_docs` must lie within it."""


def warn_if_unguarded(logger: logging.Logger, what: str, host: str, token: str | None, reach: str) -> None:
    """Warn through `logger` when `what` binds `host`, an address other machines may reach, and `token` (a resolved
    one) is None: anyone who can reach it can `reach`."""
    if token is None and not is_loopback(host):
        logger.warning("%s binds %s without a token: anyone who can reach that address can %s. Export %s=<secret> "
                       "before starting it to require one.", what, host, reach, TOKEN_ENV)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach; a gateway bound anywhere else wants a token."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
