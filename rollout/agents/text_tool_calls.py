"""Tool calls a model wrote as text: what a server without a tool parser returns instead of `tool_calls`.

A served model asked with tools writes its calls in its own chat format; the server's tool parser turns them into
the response's `tool_calls` (vLLM `--enable-auto-tool-choice --tool-call-parser NAME`, SGLang `--tool-call-parser`,
llama.cpp `--jinja`). Without one, or on a turn sent with `tool_choice="none"`, the call comes back as the message's
text. Taken as the answer it would be scored as one, so the formats served models use are recognised here:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (one block per call);
- Llama 3 JSON: the whole message `{"name": ..., "parameters": {...}}` (after an optional `<|python_tag|>`,
  several joined by `;`), or in a ```json fence;
- Mistral: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}]`, or `[TOOL_CALLS]name[ARGS]{...}`;
- `<function=name>{...}</function>` (Llama 3.1's custom tools) and `<function=name><parameter=key>value</parameter>
  </function>` (Qwen3-Coder's XML);
- llama-cpp-python's `--chat_format chatml-function-calling`: `functions.name:\n{...}` (one after another), the syntax
  of that server's own prompt, which a model writes as text on a turn sent with `tool_choice="none"`;
- bare JSON calls `{"name": ..., "arguments": {...}}` among other text: what a small model writes when it leaves out
  its template's `<tool_call>` tags (Qwen2.5-Coder-0.5B and 1.5B on llama.cpp, which then parses nothing, and go on
  in prose after the call when `tool_choice="required"`); the text around them is kept as the reply's text.

A call counts only when it names a tool that was offered: a JSON answer that happens to have a `name` is not a call.
A reply that opens as a whole JSON call, `{"name": ..., "arguments": ...}` (or `"parameters"`, bare or in
`<tool_call>`), to a tool that was not offered is a call attempt (a server's tool parser returns it as a call):
the model reads that no such tool exists and which do, and it is never an answer.
Text with HTML entities (`&#34;` or `&quot;` for quotes, as llama-cpp-python's server returns it) is read unescaped
when the text as it is holds no call.

A reply that opens as a call to an offered tool (`functions.NAME:`, `function.NAME:`, `<tool_call>` naming it,
`<function=NAME>`, `[TOOL_CALLS]`, a bare `{"name": "NAME"` or a list of such) is a call attempt whatever follows:
when no call can be read from it (its arguments are no JSON object, or are cut short), it is one call whose arguments
are `unread`. Such a call is no answer, and the model reads why it was not run (`unread_call_error`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([\w.\-]+)>(.*?)(?:</function>|$)", re.DOTALL)
_EMPTY_HERMES = re.compile(r"<tool_call>\s*</tool_call>")
"""What Qwen3-Coder's `<tool_call><function=...>...</function></tool_call>` leaves once its call is taken out."""
_PARAMETER = re.compile(r"<parameter=([\w.\-]+)>\s*(.*?)\s*</parameter>", re.DOTALL)
_MISTRAL = re.compile(r"\[TOOL_CALLS\]\s*(.*)$", re.DOTALL)
_MISTRAL_ARGS = re.compile(r"([\w.\-]+)(?:\[CALL_ID\][\w\-]*)?\[ARGS\]")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_NAME = re.compile(r'^\s*\{\s*"name"\s*:\s*"([\w.\-]+)"')
_FUNCTIONS = re.compile(r"(?:^|(?<=\s))functions?\.([\w.\-]+):[ \t]*\n?\s*")
"""`functions.name:` as that server's prompt writes it, and `function.name:`, as a small model copies it."""
_NAMED = re.compile(r'"name"\s*:\s*"([\w.\-]+)"')
_FUNCTIONS_OPENING = re.compile(r"functions?\.([\w.\-]+):")
_OPENING = re.compile(r"\s*(?:<\|python_tag\|>)?\s*(?:```(?:json)?\s*)?")
"""What may come before a call's opening: Llama 3's python tag, a Markdown fence."""
_FENCE_END = re.compile(r"\s*```\s*$")
_CALL_SHAPE = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\\n]{1,80})"\s*,\s*"(?:arguments|parameters)"\s*:')
"""A JSON call's opening, its name (any words) then its arguments."""


SERVER_PARSERS = {
    "hermes": ("hermes", "qwen25"),
    "llama3_json": ("llama3_json", "llama3"),
    "mistral": ("mistral", "mistral"),
    "function": ("qwen3_coder", "qwen3_coder"),
}
"""Per format, the tool parser that reads it: vLLM's `--tool-call-parser` name, then SGLang's. The `functions`
format is llama-cpp-python's own, which only that server reads."""


@dataclass(frozen=True, slots=True)
class TextToolCall:
    """One tool call found in a message's text."""

    name: str
    arguments: dict[str, Any]
    format: str
    """Which format it was written in: hermes, llama3_json, mistral, function, functions or json (bare among text)."""
    unread: str | None = None
    """The arguments as written when they are no JSON object (they end before their JSON does, in a reply cut at the
    token limit, or are no JSON at all); the whole call as written when its arguments cannot be told apart. The call
    is no answer, and the model reads why it was not run (`unread_call_error`); `arguments` is then {}."""
    offered: tuple[str, ...] | None = None
    """When the call names a tool that was not offered: the tools that were (it is `unread`, whole as written)."""


@dataclass(frozen=True, slots=True)
class TextToolCalls:
    """The calls a message's text holds, and the text left once they are taken out."""

    calls: list[TextToolCall]
    rest: str


def _json_values(text: str) -> list[Any]:
    """The JSON values `text` holds one after another (separated by spaces, `;` or `,`); [] when it holds anything
    else."""
    values, i, text = [], 0, text.strip()
    while i < len(text):
        try:
            value, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            return []
        values.append(value)
        while i < len(text) and text[i] in " \t\r\n;,":
            i += 1
    return values


def _call(value: Any, offered: Collection[str], fmt: str) -> TextToolCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or value["name"] not in offered:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return TextToolCall(value["name"], arguments, fmt) if isinstance(arguments, dict) else None


def _calls(values: list[Any], offered: Collection[str], fmt: str) -> list[TextToolCall]:
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    calls = [_call(v, offered, fmt) for v in flat]
    return [c for c in calls if c is not None] if all(c is not None for c in calls) else []


def _hermes(text: str, offered: Collection[str]) -> TextToolCalls | None:
    calls, rest = [], text
    for match in _HERMES.finditer(text):
        found = _calls(_json_values(match.group(1)), offered, "hermes")
        if not found and not match.group(0).rstrip().endswith("</tool_call>"):
            found = _cut_call(match.group(1), offered, "hermes")
        if found:
            calls += found
            rest = rest.replace(match.group(0), "")
    return TextToolCalls(calls, rest.strip()) if calls else None


def _ends_inside(body: str, error_at: int, error: str) -> bool:
    """Whether `body`, a JSON object that does not parse, is one cut short: it opens an object and the text ends
    inside it (the parser ran out of text, or of a string)."""
    return body.lstrip().startswith("{") and (error_at >= len(body.rstrip()) or error.startswith("Unterminated string"))


def _cut_call(body: str, offered: Collection[str], fmt: str) -> list[TextToolCall]:
    """A Hermes-style `{"name": ..., "arguments": ...` cut short, naming an offered tool: one cut call, else []."""
    name = _NAME.search(body)
    if name is None or name.group(1) not in offered:
        return []
    try:
        _DECODER.raw_decode(body.strip())
    except json.JSONDecodeError as e:
        if _ends_inside(body.strip(), e.pos, e.msg):
            return [TextToolCall(name.group(1), {}, fmt, unread=body.strip())]
    return []


def _function(text: str, offered: Collection[str]) -> TextToolCalls | None:
    calls, rest = [], text
    for match in _FUNCTION.finditer(text):
        name, body = match.group(1), match.group(2)
        if name not in offered:
            continue
        params = _PARAMETER.findall(body)
        if params:
            arguments: Any = {key: _scalar(value) for key, value in params}
        else:
            values = _json_values(body) if body.strip() else [{}]
            arguments = values[0] if len(values) == 1 else None
        if isinstance(arguments, dict):
            calls.append(TextToolCall(name, arguments, "function"))
            rest = rest.replace(match.group(0), "")
    return TextToolCalls(calls, _EMPTY_HERMES.sub("", rest).strip()) if calls else None


def _scalar(value: str) -> Any:
    """A `<parameter>` value: JSON when it reads as JSON (a number, a list), else the text."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _mistral(text: str, offered: Collection[str]) -> TextToolCalls | None:
    match = _MISTRAL.search(text)
    if match is None:
        return None
    body = match.group(1)
    calls = _calls(_json_values(body), offered, "mistral")
    if not calls:  # the v11 form: name[ARGS]{...}, one after another
        for named in _MISTRAL_ARGS.finditer(body):
            try:
                arguments, _ = _DECODER.raw_decode(body, named.end())
            except json.JSONDecodeError:
                continue
            if (call := _call({"name": named.group(1), "arguments": arguments}, offered, "mistral")) is not None:
                calls.append(call)
    return TextToolCalls(calls, text[:match.start()].strip()) if calls else None


def _llama3_json(text: str, offered: Collection[str]) -> TextToolCalls | None:
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if fenced := _FENCE.match(body):
        body = fenced.group(1)
    if not body.startswith(("{", "[")):
        return None
    calls = _calls(_json_values(body), offered, "llama3_json")
    return TextToolCalls(calls, "") if calls else None


def _functions(text: str, offered: Collection[str]) -> TextToolCalls | None:
    """llama-cpp-python's `functions.name:` followed by the arguments' JSON object, one call after another."""
    calls, kept, end = [], [], 0
    for match in _FUNCTIONS.finditer(text):
        if match.start() < end or match.group(1) not in offered:
            continue
        try:
            arguments, after = _DECODER.raw_decode(text, match.end())
        except json.JSONDecodeError as e:
            if _ends_inside(text[match.end():], e.pos - match.end(), e.msg):
                calls.append(TextToolCall(match.group(1), {}, "functions", unread=text[match.end():].strip()))
                kept.append(text[end:match.start()])
                end = len(text)
            continue
        if isinstance(arguments, dict):
            calls.append(TextToolCall(match.group(1), arguments, "functions"))
            kept.append(text[end:match.start()])
            end = after
    return TextToolCalls(calls, "".join(kept + [text[end:]]).strip()) if calls else None


def _as_written(call: str) -> str:
    """The arguments of a JSON call (`{"name": ..., "arguments": ...}`, or a list of one) whose arguments are no JSON
    object; else the call as written (no JSON, or several calls)."""
    try:
        value = json.loads(call)
    except json.JSONDecodeError:
        return call
    value = value[0] if isinstance(value, list) and len(value) == 1 else value
    arguments = value.get("arguments", value.get("parameters")) if isinstance(value, dict) else {}
    return call if isinstance(arguments, dict) else arguments if isinstance(arguments, str) else json.dumps(arguments)


def _attempt(text: str, offered: Collection[str]) -> TextToolCalls | None:
    """A reply that opens as a call to an offered tool, none of whose calls could be read: one unread call; else one
    that opens as a whole JSON call to another tool (`_call_to_another_tool`)."""
    body = _FENCE_END.sub("", text[_OPENING.match(text).end():])
    name = None
    if (functions := _FUNCTIONS_OPENING.match(body)) is not None:
        name, fmt, unread = functions.group(1), "functions", body[functions.end():]
    elif (function := _FUNCTION.match(body)) is not None:
        name, fmt, unread = function.group(1), "function", function.group(2)
    elif (hermes := _HERMES.match(body)) is not None:
        inner = hermes.group(1)
        if (function := _FUNCTION.match(inner)) is not None:  # Qwen3-Coder's XML inside the block
            name, fmt, unread = function.group(1), "function", function.group(2)
        elif (named := _NAMED.search(inner)) is not None:
            name, fmt, unread = named.group(1), "hermes", _as_written(inner)
    elif (mistral := _MISTRAL.match(body)) is not None:
        inner = mistral.group(1).strip()
        if (v11 := _MISTRAL_ARGS.match(inner)) is not None:
            name, fmt, unread = v11.group(1), "mistral", inner[v11.end():]
        elif (named := _NAMED.search(inner)) is not None:
            name, fmt, unread = named.group(1), "mistral", _as_written(inner)
    elif (named := _NAME.match(body.removeprefix("["))) is not None:  # one call, or a list of them
        name, fmt, unread = named.group(1), "llama3_json", _as_written(body.strip())
    if name in offered:
        return TextToolCalls([TextToolCall(name, {}, fmt, unread=unread.strip())], "")
    return _call_to_another_tool(text, body, offered)


def _call_to_another_tool(text: str, body: str, offered: Collection[str]) -> TextToolCalls | None:
    """A reply that opens as a whole JSON call (bare, in a list or in `<tool_call>`) to a tool that was not offered:
    a call too, as a server's tool parser would return it, whose name may be any words the model made up."""
    hermes = _HERMES.match(body)
    shape = _CALL_SHAPE.match(hermes.group(1) if hermes is not None else body.removeprefix("["))
    if shape is None:
        return None
    fmt = "hermes" if hermes is not None else "llama3_json"
    return TextToolCalls([TextToolCall(shape.group(1), {}, fmt, unread=text.strip(), offered=tuple(sorted(offered)))],
                         "")


def unread_call_error(call: TextToolCall, *, cut: bool) -> str:
    """What the model reads of a call whose arguments could not be read (`call.unread`): why, and that the tool was
    not called. `cut`: the reply was cut at the token limit, which the error then names as the likely cause."""
    if call.offered is not None:
        return (f"Error: there is no tool named {call.name}; the tool was not called. The tools are "
                f"{', '.join(call.offered)}: call one of them with its arguments as a JSON object matching its "
                "parameters.")
    try:
        value = json.loads(call.unread or "")
    except json.JSONDecodeError as e:
        why = f"it is not valid JSON ({e.msg} at position {e.pos})"
    else:
        # Whole calls as written (several, one of them not to an offered tool), or arguments that are no object.
        calls = value if isinstance(value, list) else [value]
        why = ("it does not read as calls to the tools offered" if calls and all(isinstance(v, dict) for v in calls)
               else f"its arguments are not a JSON object (got {type(value).__name__})")
    if cut:
        why += " (your reply was cut at the token limit: keep the arguments short)"
    return (f"Error: your call to {call.name} could not be read: {why}; the tool was not called. Call it again with "
            "its arguments as a JSON object matching its parameters.")


_BARE_CALL = re.compile(r'\{\s*"name"\s*:\s*"([\w.\-]+)"')


def _bare_json(text: str, offered: Collection[str]) -> TextToolCalls | None:
    """Whole JSON calls to offered tools written among other text, each taken out; the rest is the reply's text.
    Text that is JSON through and through is Llama 3's format, read or refused whole there."""
    if _json_values(text):
        return None
    calls, kept, end = [], [], 0
    for match in _BARE_CALL.finditer(text):
        if match.start() < end or match.group(1) not in offered:
            continue
        try:
            value, after = _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if (call := _call(value, offered, "json")) is not None:
            calls.append(call)
            kept.append(text[end:match.start()])
            end = after
    return TextToolCalls(calls, "".join(kept + [text[end:]]).strip()) if calls else None


def _find(text: str, offered: Collection[str]) -> TextToolCalls | None:
    for parse in (_hermes, _mistral, _function, _functions, _llama3_json, _bare_json):
        if (found := parse(text, offered)) is not None:
            return found
    return None


def find_text_tool_calls(text: str | None, offered: Collection[str]) -> TextToolCalls | None:
    """The tool calls naming an `offered` tool that `text` was written as, in the first format that finds any (in
    the text unescaped when it has HTML entities and holds none as it is); else the one unread call of a reply that
    opens as a call to an offered tool; None when it holds none."""
    if not text or not offered:
        return None
    found = _find(text, offered)
    unescaped = html.unescape(text) if "&" in text else text
    if found is None and unescaped != text:
        found = _find(unescaped, offered)
    return found if found is not None else _attempt(unescaped, offered)


def no_parser_message(found: TextToolCalls, reply: str) -> str:
    """The one line a run stops with when the server returned tool calls as text: which flag to set, and the reply
    that showed it."""
    shown = " ".join(reply.split())
    shown = shown if len(shown) <= 160 else shown[:157] + "..."
    if found.calls[0].format == "functions":
        return (f"the LLM server returned a tool call as text in llama-cpp-python's chatml-function-calling syntax "
                f"(functions.NAME:) instead of tool_calls: serve the model with llama.cpp's llama-server --jinja, or "
                f"set agent.text_tool_calls=parse to parse them here. The reply: {shown!r}")
    if found.calls[0].format == "json":
        return (f"the model wrote a tool call as bare JSON among its text, without its chat template's tool-call tags, "
                f"so no server's tool parser reads it: set agent.text_tool_calls=parse to parse them here. "
                f"The reply: {shown!r}")
    vllm, sglang = SERVER_PARSERS[found.calls[0].format]
    return (f"the LLM server returned a tool call as text instead of tool_calls, so it has no tool parser: start "
            f"vLLM with --enable-auto-tool-choice --tool-call-parser {vllm}, SGLang with --tool-call-parser {sglang}, "
            f"llama.cpp's server with --jinja; or set agent.text_tool_calls=parse to parse them here. "
            f"The reply: {shown!r}")
