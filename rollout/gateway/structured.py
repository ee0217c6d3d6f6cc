"""Typed tool results sent once: structured content without the text a client makes from it itself.

The `mcp` SDK's server sends a tool's typed result twice: as structured content and, in a text
block, as the same object serialized to JSON indented by 2 (`pydantic_core.to_json`). A client
that says in the request `_meta` that it makes the text itself (`rollout/text: from_structured`,
as `envs.http_mcp_env.HttpMCPEnv` does) gets the structured content only, marked the same way;
`rollout.wire.result_text` then makes exactly the text the SDK would have sent. Other clients
(another MCP client, the HTTP proxy) get both, as before.

Only results a local tool built itself take this path: an instance of the tool's declared output
model, whose fields serialize under their own names (no aliases), so the structured content (by
alias) and the text (by name) are one serialization. The SDK would validate such an instance
against that same model; it is dumped as it is. Anything else (a `CallToolResult` the tool made,
another type, an upstream tool, an error) goes through the SDK's conversion unchanged.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import UnexpectedToolError
from mcp.server.mcpserver.tools.tool_manager import ToolManager
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import BaseModel

from rollout.wire import META_TEXT, TEXT_FROM_STRUCTURED


def wants_structured_only(context: Context[Any, Any] | None) -> bool:
    """True when the request's `_meta` says the client makes the text from the structured content."""
    if context is None:
        return False
    try:
        meta = context.request_context.meta
    except ValueError:  # a context outside a request
        return False
    return bool(meta) and meta.get(META_TEXT) == TEXT_FROM_STRUCTURED


async def structured_only(
    tools: ToolManager, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None
) -> CallToolResult | InputRequiredResult | None:
    """The call's result without its text when the client asked for that and the tool's output allows it;
    None to let the SDK answer the call as usual."""
    tool = tools.get_tool(name)
    if tool is None or not wants_structured_only(context):
        return None
    metadata = tool.fn_metadata
    model = metadata.output_model
    if metadata.wrap_output or metadata.output_schema is None or not _dumps_by_name(model):
        return None
    raw = await tools.call_tool(name, arguments, context, convert_result=False)  # tool errors raise as usual
    if type(raw) is model:
        structured = raw.model_dump(mode="json", by_alias=True)
        return CallToolResult(content=[], structured_content=structured, _meta={META_TEXT: TEXT_FROM_STRUCTURED})
    try:
        return metadata.convert_result(raw)
    except MCPError:
        raise
    except Exception as exc:  # as the SDK reports a result that fails conversion
        raise UnexpectedToolError(f"Error executing tool {name}") from exc


@functools.cache
def _dumps_by_name(model: Any) -> bool:
    """True for a pydantic model whose fields, nested models' included, dump under their own names."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return False
    if model.model_config.get("serialize_by_alias"):
        return False
    for field in model.model_fields.values():
        if field.alias is not None or field.serialization_alias is not None:
            return False
        if not all(_dumps_by_name(inner) for inner in _models_in(field.annotation)):
            return False
    return True


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names, at any depth (`list[Hit]`, `Hit | None`, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
