"""Text the gateway can send: every string a call takes or answers must be valid Unicode.

A JSON body may write half of a UTF-16 surrogate pair alone (`"\\ud800"`). Python's `json` decodes it into a string
that no UTF-8 encoder accepts, so it breaks whatever later writes that string out: an encoder's tokenizer, a corpus
store's lookup, the JSON of an answer that echoes the query. The MCP transport's own JSON parser refuses such an
escape; the gateway's JSON routes (the tool proxy, `/retrieve`) decode with Python's and meet it as a string.

So a lone surrogate is refused where text enters, by one check (`lone_surrogate`): `TextCheck`, a middleware every
tool call passes whatever its route, refuses arguments that hold one as invalid arguments (the proxy's 400, an
`is_error` result in MCP) before the tool runs, and `/retrieve` refuses such a query with a 400
(`rollout.gateway.retrieve_api.parse_request`). An answer that holds one (a corpus whose text has one) cannot be
sent: `TextCheck` makes it an error result, so the call is recorded as failed, never as `ok` beside an answer that
never arrived.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel
from pydantic_core import PydanticCustomError, ValidationError

logger = logging.getLogger(__name__)

__all__ = ["LoneSurrogate", "TextCheck", "lone_surrogate"]

FIX = "send valid Unicode text (a \\ud800-\\udfff escape must be one half of a surrogate pair)"


@dataclass(frozen=True, slots=True)
class LoneSurrogate:
    """Where a value holds a lone surrogate."""

    path: tuple[str | int, ...]
    """Keys and list positions down to the string holding it; empty for the value itself."""
    at: int
    """The character's position in that string."""
    code: int
    """The surrogate's code point, U+D800 to U+DFFF."""

    def where(self, name: str = "") -> str:
        """`name` followed by the path, as `query` or `doc_ids[2]` (the path alone without a name)."""
        text = name
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
        return text

    def describe(self) -> str:
        """What is wrong, for the sentence `<where> <describe()>`."""
        return f"holds a lone surrogate (U+{self.code:04X}) at character {self.at}: {FIX}"


def lone_surrogate(value: Any) -> LoneSurrogate | None:
    """The first lone surrogate in `value`: a string, or JSON-like dicts, lists and pydantic models of them (keys
    included); None when every string in it can be encoded as UTF-8."""
    # Iterative: a decoded body may nest as deep as the JSON parser allows, past Python's recursion limit here.
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if item.isascii():  # nearly every string: checked without encoding it
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                return LoneSurrogate(path, e.start, ord(item[e.start]))
        elif isinstance(item, Mapping):
            entries = list(item.items())
            for key, child in reversed(entries):  # reversed: the stack pops the first entry first
                stack.append(((*path, str(key)), child))
                stack.append((path, key))
        elif isinstance(item, (list, tuple)):
            stack.extend(((*path, i), child) for i, child in reversed(list(enumerate(item))))
        elif isinstance(item, BaseModel):
            stack.extend(((*path, k), v) for k, v in reversed(list(vars(item).items())))
    return None


def _invalid_arguments(tool: str, found: LoneSurrogate, value: Any) -> CallToolResult:
    """The refusal of arguments holding a lone surrogate, worded as the SDK words arguments that fail the tool's
    schema (a pydantic validation error), so that every client and the ledger read it as invalid arguments."""
    error = ValidationError.from_exception_data(f"{tool}Arguments", [{
        "type": PydanticCustomError("lone_surrogate", "{problem}", {"problem": found.describe()}),
        "loc": found.path, "input": value,
    }])
    return CallToolResult(content=[TextContent(type="text", text=f"Error executing tool {tool}: {error}")],
                          is_error=True)


def _value_at(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        value = value[part] if isinstance(value, (Mapping, list, tuple)) else value
    return value


class TextCheck:
    """MCP server middleware: a tools/call whose arguments hold a lone surrogate is refused as invalid arguments,
    and an answer holding one becomes an error result. Place it inside `ToolStatsMiddleware`, so that both are
    recorded as the failures they are."""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params or {}
        tool = str(params.get("name", ""))
        arguments = params.get("arguments") or {}
        found = lone_surrogate(arguments)
        if found is not None:
            logger.debug("Refused a call of %s: its argument %s holds a lone surrogate", tool, found.where())
            return _invalid_arguments(tool, found, _value_at(arguments, found.path))
        result = await call_next(ctx)
        found = lone_surrogate(result)
        if found is None:
            return result
        logger.warning("Tool %s answered text that cannot be sent (a lone surrogate at %s): answered as an error",
                       tool, found.where())
        return CallToolResult(content=[TextContent(type="text", text=(
            f"Error executing tool {tool}: its answer holds a lone surrogate (U+{found.code:04X}) at "
            f"{found.where() or 'its text'}, which cannot be sent as UTF-8; the data it read (e.g. the corpus) "
            "holds invalid Unicode: fix that text"))], is_error=True)
