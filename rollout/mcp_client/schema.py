"""MCP tool input schemas to OpenAI function-call schemas.

Function-calling models read a schema as a self-contained tree, so every reference is
inlined. One `RefResolver` does that for any source of definitions; only the `lookup`
differs: an MCP input schema resolves `#/$defs/...` (or draft-7 `#/definitions/...`)
against itself, an OpenAPI operation resolves `#/components/schemas/...` against its
document. Recursive types would inline forever, so a reference already being expanded
on the current path (a cycle), or one nested deeper than `max_depth` references, is
pruned to its `type` and `description`: the model still knows what kind of value to
send, and the schema stays small.

A schema that cannot be converted at all (a reference that points nowhere, a remote one) does
not cost the tool: `mcp_tool_to_function` offers it with `FALLBACK_PARAMETERS`, a plain object
schema, and a warning naming the tool, so one odd upstream tool never stops a run from starting.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from rollout.errors import SchemaError

if TYPE_CHECKING:
    # Annotations only: importing mcp_types costs ~0.5 s, which the env's import (Ray workers) need not pay.
    from mcp_types import Tool

__all__ = [
    "FALLBACK_PARAMETERS",
    "Lookup",
    "RefResolver",
    "SchemaError",
    "input_schema_to_parameters",
    "mcp_tool_to_function",
    "openapi_schema_to_parameters",
    "pointer_lookup",
]

logger = logging.getLogger(__name__)

Lookup = Callable[[str], Mapping[str, Any]]
"""Return the schema a `$ref` string points to, or raise `SchemaError`."""

DEFAULT_MAX_DEPTH = 3
FALLBACK_PARAMETERS: dict[str, Any] = {"type": "object"}
"""Parameters of a tool whose own schema cannot be converted: any JSON object."""

# Keywords whose value is a schema, a list of schemas, or a name -> schema map. Only these
# are walked: everything else (enum, default, examples, const, required) is data and is
# copied verbatim, so a property called "title" or a default holding "$ref" survives.
_SUBSCHEMA_KEYS = frozenset({
    "items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames",
    "additionalItems", "unevaluatedItems", "unevaluatedProperties",
    "allOf", "anyOf", "oneOf", "prefixItems",
})
_SUBSCHEMA_MAP_KEYS = frozenset({"properties", "patternProperties", "dependentSchemas"})
# Titles are noise to a model (pydantic repeats every field name); definition tables are
# inlined by now; `$schema` describes a document this no longer is.
_DROPPED_KEYS = frozenset({"title", "$defs", "definitions", "$schema"})
# Where definitions usually live, so an unknown reference can list the real ones.
_DEFINITION_TABLES = (("$defs",), ("definitions",), ("components", "schemas"))


def _available(root: Mapping[str, Any]) -> list[str]:
    refs = []
    for path in _DEFINITION_TABLES:
        table: Any = root
        for part in path:
            table = table.get(part) if isinstance(table, Mapping) else None
        if isinstance(table, Mapping):
            refs += ["#/" + "/".join(path) + "/" + name for name in table]
    return sorted(refs)


def pointer_lookup(root: Mapping[str, Any]) -> Lookup:
    """Resolve local references (`#/$defs/X`, `#/definitions/X`, `#/components/schemas/X`,
    or any other `#/...` JSON pointer) against `root`: the input schema itself for MCP,
    the whole OpenAPI document for an operation's schema."""

    def lookup(ref: str) -> Mapping[str, Any]:
        node: Any = root
        if ref.startswith("#"):
            # Refs are URI fragments: percent-decode, then undo JSON-pointer escapes.
            parts = [unquote(p).replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/")[1:]]
            for part in parts:
                if isinstance(node, Mapping) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    node = None
                    break
        else:
            node = None  # remote documents are never fetched: a tool schema must stand alone
        if not isinstance(node, Mapping):
            available = ", ".join(_available(root)) or "none"
            raise SchemaError(
                f"unknown reference {ref!r}: only local '#/...' references to schemas can be "
                f"inlined; available definitions: {available}"
            )
        return node

    return lookup


def _implied_type(schema: Mapping[str, Any]) -> Any:
    if "type" in schema:
        return schema["type"]
    if "properties" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None  # e.g. a bare anyOf: no type beats a wrong one


class RefResolver:
    """Inline every `$ref` that `lookup` resolves, pruning cycles and references nested past
    `max_depth` (a chain of exactly `max_depth` references is still inlined in full)."""

    def __init__(self, lookup: Lookup, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        self.lookup = lookup
        self.max_depth = max_depth

    def resolve(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `schema` with no `$ref`, no titles and no definition tables."""
        return self._schema(schema, (), 0)

    def _schema(self, node: Any, path: tuple[str, ...], depth: int) -> Any:
        if not isinstance(node, Mapping):
            return copy.deepcopy(node)  # `true` / `false` are schemas too; keep them as they are
        if "$ref" in node:
            return self._ref(node, path, depth)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED_KEYS:
                continue
            if key in _SUBSCHEMA_MAP_KEYS and isinstance(value, Mapping):
                out[key] = {name: self._schema(sub, path, depth) for name, sub in value.items()}
            elif key in _SUBSCHEMA_KEYS and isinstance(value, list):
                out[key] = [self._schema(sub, path, depth) for sub in value]
            elif key in _SUBSCHEMA_KEYS:
                out[key] = self._schema(value, path, depth)
            else:
                out[key] = copy.deepcopy(value)
        # Older generators wrap a reference as `allOf: [{$ref}]` to give it a description;
        # a lone branch is merged into its parent, exactly like `$ref` siblings.
        branches = out.get("allOf")
        if isinstance(branches, list) and len(branches) == 1 and isinstance(branches[0], dict):
            del out["allOf"]
            out = {**branches[0], **out}
        return out

    def _ref(self, node: Mapping[str, Any], path: tuple[str, ...], depth: int) -> dict[str, Any]:
        ref = node["$ref"]
        if not isinstance(ref, str):
            raise SchemaError(f"$ref must be a string, got {ref!r}")
        # Keys beside a $ref refine the target for this use (a field's own description,
        # default), so they win over the target's.
        merged = {**self.lookup(ref), **{k: v for k, v in node.items() if k != "$ref"}}
        if ref in path or depth >= self.max_depth:
            logger.debug("pruned %s (%s)", ref, "cycle" if ref in path else f"depth limit {self.max_depth}")
            implied = _implied_type(merged)
            pruned = {} if implied is None else {"type": implied}
            if "description" in merged:
                pruned["description"] = merged["description"]
            return pruned
        return self._schema(merged, (*path, ref), depth + 1)


def _as_parameters(resolved: dict[str, Any]) -> dict[str, Any]:
    # Function calling wants an object at the top even when a tool takes no arguments. A schema
    # that says only `{"type": "object"}` (any object, e.g. `FALLBACK_PARAMETERS`) stays as it is:
    # an empty `properties` would tell the model the tool takes no arguments.
    if "type" not in resolved:
        resolved = {"type": "object", **resolved}
        resolved.setdefault("properties", {})
    return resolved


def input_schema_to_parameters(
    schema: Mapping[str, Any] | None, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> dict[str, Any]:
    """The `parameters` of a function call for an MCP tool's `inputSchema` (refs against itself)."""
    schema = schema or {}
    return _as_parameters(RefResolver(pointer_lookup(schema), max_depth=max_depth).resolve(schema))


def openapi_schema_to_parameters(
    schema: Mapping[str, Any], document: Mapping[str, Any], *, max_depth: int = DEFAULT_MAX_DEPTH
) -> dict[str, Any]:
    """The same for a schema taken from an OpenAPI `document` (`#/components/schemas/...`)."""
    return _as_parameters(RefResolver(pointer_lookup(document), max_depth=max_depth).resolve(schema))


def mcp_tool_to_function(tool: Tool, *, max_depth: int = DEFAULT_MAX_DEPTH, strict: bool = False) -> dict[str, Any]:
    """`{"type": "function", "function": {name, description, parameters}}` for one MCP tool.

    A schema that cannot be converted gives `FALLBACK_PARAMETERS` and a warning naming the tool;
    with `strict=True` it is a `SchemaError` naming the tool instead.
    """
    try:
        parameters = input_schema_to_parameters(tool.input_schema, max_depth=max_depth)
    except SchemaError as e:
        if strict:
            raise SchemaError(f"tool {tool.name!r}: {e}") from e
        logger.warning("tool %r: its input schema cannot be converted (%s); offering it with the plain schema %s, "
                       "so the model sees no parameter names. Fix the tool's inputSchema to offer its real "
                       "parameters", tool.name, e, FALLBACK_PARAMETERS)
        parameters = dict(FALLBACK_PARAMETERS)
    return {
        "type": "function",
        "function": {"name": tool.name, "description": (tool.description or "").strip(), "parameters": parameters},
    }
