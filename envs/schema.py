"""MCP tool input schemas to OpenAI function-call schemas."""

from __future__ import annotations

import copy
from typing import Any

from mcp_types import Tool

_DROP_KEYS = {"title", "$defs", "definitions"}


class SchemaError(ValueError):
    """A tool schema cannot be converted (e.g. a reference that points nowhere)."""


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...], depth: int, max_depth: int) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, seen, depth, max_depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith("#/$defs/") or name not in defs:
            raise SchemaError(f"unresolvable reference {ref!r}: only local #/$defs/ references are supported")
        target = defs[name]
        if name in seen or depth >= max_depth:
            # A cycle or a schema too deep to inline: keep what a model needs to fill it in.
            return {k: target[k] for k in ("type", "description") if k in target} or {"type": "object"}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs, (*seen, name), depth + 1, max_depth)
    return {k: _inline(v, defs, seen, depth, max_depth) for k, v in node.items() if k not in _DROP_KEYS}


def input_schema_to_parameters(schema: dict[str, Any], *, max_depth: int = 3) -> dict[str, Any]:
    """Inline `$defs` references and drop titles so any function-calling model can read the schema."""
    schema = copy.deepcopy(schema or {"type": "object", "properties": {}})
    defs = schema.get("$defs", {}) or {}
    params = _inline(schema, defs, (), 0, max_depth)
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return params


def mcp_tool_to_function(tool: Tool) -> dict[str, Any]:
    """`{"type": "function", "function": {name, description, parameters}}` for one MCP tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": (tool.description or "").strip(),
            "parameters": input_schema_to_parameters(tool.input_schema),
        },
    }
