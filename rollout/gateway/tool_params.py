"""Tool parameters the gateway decides: pinned values (`fixed_params`) and defaults from the knowledge base.

A gateway file pins arguments per tool group, `{"name": "rag_query", "fixed_params": {"top_k": 5}}`, so
that two arms of an experiment differ only in what they mean to compare. A tool function declares a
default the gateway owns with `KBDefault("default_top_k")` instead of a number, so the default its
input schema states is the one the call uses (`--default-top-k`).

`bind_tool` turns a registered function into the one the gateway serves. Pinned parameters leave its
signature, hence the input schema the model reads, and every call passes the pinned value. A client
that still sends a pinned parameter is not refused: the SDK drops arguments the schema does not name
(as it does for any unknown argument), so the call runs with the pinned value. Refusing would punish a
client for a parameter it was never shown, and the run's identity already says what was pinned.

An upstream module (`"source": "mcp"`) pins arguments for the upstream's tools the same way, with
`fixed_params` on the module: `check_pins` validates them against the upstream tools' JSON input
schemas when the gateway starts (`schema_parameter_checks`), `hide_pinned` takes them out of the
schemas the gateway lists, and every forwarded call carries them (`rollout.gateway.upstream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import jsonschema
import referencing.exceptions
from pydantic import TypeAdapter, ValidationError

from rollout.errors import ConfigError
from rollout.gateway.registry import ToolFn

__all__ = [
    "KBDefault", "bind_tool", "check_fixed_params", "check_pins", "function_parameter_checks", "hide_pinned",
    "schema_parameter_checks", "tool_parameters",
]


@dataclass(frozen=True, slots=True)
class KBDefault:
    """A parameter default read from the gateway's knowledge base when the gateway is built."""

    attribute: str
    """`KnowledgeBase` attribute holding the value, e.g. `default_top_k` (set by `--default-top-k`)."""

    def value(self, kb: object) -> Any:
        """The knowledge base's value; a missing attribute is a programming error, named."""
        try:
            return getattr(kb, self.attribute)
        except AttributeError:
            raise AttributeError(
                f"KBDefault({self.attribute!r}): the knowledge base has no attribute {self.attribute!r}"
            ) from None


def tool_parameters(fn: ToolFn) -> dict[str, inspect.Parameter]:
    """The parameters of `fn` its input schema shows (all but the injected MCP context), annotations evaluated."""
    # Imported here: the MCP server package is a large import that a run's driver, which plans but does not
    # serve the gateway, would otherwise pay at start-up.
    from mcp.server.mcpserver.utilities.context_injection import find_context_parameter

    context = find_context_parameter(fn)
    parameters = inspect.signature(fn, eval_str=True).parameters
    return {name: p for name, p in parameters.items() if name != context}


ParameterCheck = Callable[[Any], Any]
"""Checks a value for one tool parameter and returns it as the tool receives it; a `ValueError` says why not."""


def check_fixed_params(group: str, tools: Sequence[ToolFn], pins: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each registered tool's pinned arguments (by tool name), validated against its signature (`check_pins`)."""
    return check_pins(group, {fn.__name__: function_parameter_checks(fn) for fn in tools}, pins)


def check_pins(
    group: str, parameters: Mapping[str, Mapping[str, ParameterCheck]], pins: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each tool's pinned arguments (by tool name); a `ConfigError` names a bad pin.

    `parameters` gives each tool of the group its parameters' checks: `function_parameter_checks` for a
    registered function, `schema_parameter_checks` for an upstream tool's input schema. A pin applies to
    every tool of the group that takes the parameter. A name none of them takes, or a value a tool's check
    rejects, is an error naming the group, the parameter and the tools' parameters.
    """
    by_tool: dict[str, dict[str, Any]] = {tool: {} for tool in parameters}
    for name, value in pins.items():
        takers = [tool for tool, checks in parameters.items() if name in checks]
        if not takers:
            raise ConfigError(
                f"tool group {group!r} pins {name!r} in fixed_params, but no tool of the group takes it. "
                f"{_describe(parameters)}. Fix fixed_params in the gateway file."
            )
        for tool in takers:
            try:
                by_tool[tool][name] = parameters[tool][name](value)
            except ValueError as e:
                raise ConfigError(
                    f"tool group {group!r} pins {name!r} to {value!r} in fixed_params, which {tool}'s schema "
                    f"rejects ({e}). {_describe({tool: parameters[tool]})}. Fix fixed_params in the gateway file."
                ) from None
    return {tool: values for tool, values in by_tool.items() if values}


def function_parameter_checks(fn: ToolFn) -> dict[str, ParameterCheck]:
    """A check per parameter of a registered function: its annotation, validated (and coerced) by pydantic."""
    return {name: _annotation_check(p.annotation) for name, p in tool_parameters(fn).items()}


def _annotation_check(annotation: Any) -> ParameterCheck:
    adapter = TypeAdapter(Any if annotation is inspect.Parameter.empty else annotation)

    def check(value: Any) -> Any:
        try:
            return adapter.validate_python(value)
        except ValidationError as e:
            raise ValueError("; ".join(err["msg"] for err in e.errors())) from None

    return check


def schema_parameter_checks(input_schema: Mapping[str, Any]) -> dict[str, ParameterCheck]:
    """A check per property of an MCP tool's JSON input schema (an upstream tool's): the value must validate
    against the property's schema, `$ref`s resolved in the whole input schema. The value passes unchanged."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: _schema_check(input_schema, name) for name in properties}


def _schema_check(input_schema: Mapping[str, Any], name: str) -> ParameterCheck:
    # The whole schema with only this property and nothing required: `$ref`s and `$defs` stay resolvable.
    schema = {**input_schema, "properties": {name: input_schema["properties"][name]}, "required": []}

    def check(value: Any) -> Any:
        try:
            jsonschema.validate({name: value}, schema)
        except jsonschema.ValidationError as e:
            raise ValueError(e.message) from None
        except (jsonschema.SchemaError, referencing.exceptions.Unresolvable) as e:
            raise ValueError(f"its input schema cannot be used to check it: {e}") from None
        return value

    return check


def hide_pinned(input_schema: Mapping[str, Any], pinned: Collection[str]) -> dict[str, Any]:
    """An MCP input schema without the pinned parameters: gone from `properties` and `required`."""
    schema = dict(input_schema)
    if not pinned:
        return schema
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        schema["properties"] = {k: v for k, v in properties.items() if k not in pinned}
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [k for k in required if k not in pinned]
    return schema


async def _on_daemon_thread(call: Callable[[], Any]) -> Any:
    """`call()` on a thread of its own, awaited. The thread is a daemon: one a cancelled call left running
    (a hung tool) must not hold the gateway's exit, as the interpreter waits for every other thread at exit
    (anyio's worker threads are not daemons, so a stop waited for the hung tool however long it took)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the caller was cancelled and left
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def work() -> None:
        try:
            result, error = context.run(call), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting caller
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed while the call ran on: nobody is waiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="gateway-tool-call", daemon=True).start()
    return await done


def bind_tool(fn: ToolFn, pins: Mapping[str, Any], kb: object, limiter: anyio.CapacityLimiter | None = None) -> ToolFn:
    """`fn` as the gateway serves it: `pins` removed from its signature and always passed, `KBDefault`
    defaults replaced by the knowledge base's values, and, with a `limiter`, a sync `fn` run on a worker
    thread only while it holds one of the limiter's slots. `fn` itself when there is nothing to change."""
    signature = inspect.signature(fn, eval_str=True)
    kept = []
    for p in signature.parameters.values():
        if p.name in pins:
            continue
        if isinstance(p.default, KBDefault):
            p = p.replace(default=p.default.value(kb))
        kept.append(p)
    threaded = limiter is not None and not inspect.iscoroutinefunction(fn)
    if not pins and not threaded and kept == list(signature.parameters.values()):
        return fn
    fixed = dict(pins)

    if inspect.iscoroutinefunction(fn):
        async def bound(**kwargs: Any) -> Any:
            return await fn(**kwargs, **fixed)
    elif threaded:
        async def bound(**kwargs: Any) -> Any:
            # Cancelled (the gateway's tool timeout, or its shutdown), the caller leaves at once and gives its slot
            # back; a thread cannot be stopped, so a hung one runs on unseen instead of starving its group.
            assert limiter is not None
            async with limiter:
                return await _on_daemon_thread(functools.partial(fn, **kwargs, **fixed))
    else:
        def bound(**kwargs: Any) -> Any:
            return fn(**kwargs, **fixed)

    functools.update_wrapper(bound, fn)
    # The SDK builds the input schema from `__signature__` and finds the context parameter in the type hints.
    bound.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    hints = typing.get_type_hints(fn, include_extras=True)
    bound.__annotations__ = {name: hint for name, hint in hints.items() if name not in fixed}
    return bound


def _describe(parameters: Mapping[str, Mapping[str, Any]]) -> str:
    return "; ".join(f"{tool} takes {', '.join(params) or 'no parameters'}" for tool, params in parameters.items())
