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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from pydantic import TypeAdapter, ValidationError

from rollout.errors import ConfigError
from rollout.gateway.registry import ToolFn

__all__ = ["KBDefault", "bind_tool", "check_fixed_params", "tool_parameters"]


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
    context = find_context_parameter(fn)
    parameters = inspect.signature(fn, eval_str=True).parameters
    return {name: p for name, p in parameters.items() if name != context}


def check_fixed_params(group: str, tools: Sequence[ToolFn], pins: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tool's pinned arguments (by tool name), validated against its schema; a `ConfigError` names a bad pin.

    A pin applies to every tool of the group that takes the parameter. A name none of them takes, or a
    value a tool's schema rejects, is an error naming the group, the parameter and the tool's parameters.
    """
    by_tool: dict[str, dict[str, Any]] = {fn.__name__: {} for fn in tools}
    signatures = {fn.__name__: tool_parameters(fn) for fn in tools}
    for name, value in pins.items():
        takers = [tool for tool, params in signatures.items() if name in params]
        if not takers:
            raise ConfigError(
                f"tool group {group!r} pins {name!r} in fixed_params, but no tool of the group takes it. "
                f"{_describe(signatures)}. Fix fixed_params in the gateway file."
            )
        for tool in takers:
            annotation = signatures[tool][name].annotation
            adapter = TypeAdapter(Any if annotation is inspect.Parameter.empty else annotation)
            try:
                by_tool[tool][name] = adapter.validate_python(value)
            except ValidationError as e:
                reason = "; ".join(err["msg"] for err in e.errors())
                raise ConfigError(
                    f"tool group {group!r} pins {name!r} to {value!r} in fixed_params, which {tool}'s schema "
                    f"rejects ({reason}). {_describe({tool: signatures[tool]})}. Fix fixed_params in the gateway file."
                ) from None
    return {tool: values for tool, values in by_tool.items() if values}


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


def _describe(signatures: Mapping[str, Mapping[str, inspect.Parameter]]) -> str:
    return "; ".join(f"{tool} takes {', '.join(params) or 'no parameters'}" for tool, params in signatures.items())
