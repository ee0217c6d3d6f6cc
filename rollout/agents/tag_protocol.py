"""A tag protocol: how a model that writes plain text asks for a search or gives its answer, and how the
results are written back into its text. Pure functions of the text, so `rollout.agents.tagged` (the loop)
and the benchmark share them.

Search-R1's protocol, the default: `<search> query </search>` asks, `<answer> … </answer>` ends, results come
back as `\\n\\n<information>Doc 1(Title: …) …\\nDoc 2(Title: …) …</information>\\n\\n`, and a turn with neither
gets a fixed feedback line. Any other protocol (R1-Searcher's `<|begin_of_query|>…<|end_of_query|>`, a
ReAct `Action: Search[…]` line, two search tags for two tools) is the same machinery with other strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rollout.agents.base import query_functions
from rollout.errors import ConfigError
from rollout.records import ToolResult
from rollout.wire import result_hits

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Template:
    """A text with `{name}` placeholders, filled in one pass (a value holding `{text}` stays as it is)."""

    __slots__ = ("_parts", "source")

    def __init__(self, source: str, key: str, fields: Iterable[str], *, required: Iterable[str] = ()) -> None:
        known = tuple(fields)
        if not isinstance(source, str):
            raise ConfigError(f"{key} must be a string, got {source!r}")
        names = set(_PLACEHOLDER.findall(source))
        if unknown := sorted(names - set(known)):
            raise ConfigError(f"{key} has unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
                              f"it may use {', '.join('{' + n + '}' for n in known)}")
        if missing := [n for n in required if n not in names]:
            raise ConfigError(f"{key} must contain {', '.join('{' + n + '}' for n in missing)}")
        self.source = source
        # Literal and field alternate: [literal, field, literal, ...].
        self._parts = re.split(r"\{(" + "|".join(map(re.escape, known)) + r")\}", source) if known else [source]

    def __call__(self, **values: str) -> str:
        return "".join(part if i % 2 == 0 else values[part] for i, part in enumerate(self._parts))


@dataclass(frozen=True, slots=True)
class Tag:
    """An opening and a closing string around what the model writes for an action."""

    open: str
    close: str
    tool: str | None = None
    """For a search tag: the tool it calls (None: the mode's first query tool). None for the answer tag."""
    answers: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """What one turn's text asks for."""

    kind: Literal["search", "answer", "invalid"]
    text: str
    """The turn's text as it stays in the conversation: up to the end of its first complete action (what a model
    wrote past it, when the server did not stop there, is dropped), all of it for an invalid turn."""
    content: str = ""
    """The query or the answer between the tags, stripped."""
    tag: Tag | None = None


@dataclass(frozen=True, slots=True)
class TagProtocol:
    """The strings of one protocol, checked; `parse` reads a turn, `observation` writes a search's results back."""

    instruction: Template
    """The prompt, with `{question}`."""
    tags: tuple[Tag, ...]
    """The search tags, then the answer tag."""
    information: Template
    """Wraps a search's results (`{results}`), e.g. `\\n\\n<information>{results}</information>\\n\\n`."""
    passage: Template
    """One passage (`{i}` 1-based, `{title}`, `{text}`, `{id}`), e.g. `Doc {i}(Title: {title}) {text}\\n`."""
    strip_results: bool
    """Strip the joined passages (Search-R1 does: no newline before `</information>`)."""
    no_results: str
    """The results when a search found nothing."""
    invalid: str | None
    """Appended after a turn with no complete tag; None: such a turn ends the task without an answer."""
    stop: tuple[str, ...]
    """Stop strings sent with every request."""

    @classmethod
    def from_config(cls, *, instruction: Any, searches: Any, answer: Any, information: Any, passage: Any,
                    strip_results: Any = True, no_results: Any = "", invalid: Any = None,
                    stop: Any = None) -> TagProtocol:
        """Check the `agent.*` protocol keys; anything wrong is a `ConfigError` naming the key."""
        if not isinstance(searches, list | tuple) or not searches:
            raise ConfigError(f"agent.searches={searches!r} must be a list of {{open, close, tool}} tags "
                              "(tool null = the mode's first query tool)")
        tags = [_tag(s, f"agent.searches[{i}]", search=True) for i, s in enumerate(searches)]
        tags.append(_tag(answer, "agent.answer", search=False))
        opens = [t.open for t in tags]
        if len(set(opens)) != len(opens):
            raise ConfigError(f"agent.searches and agent.answer must open with different strings, got {opens}")
        if not isinstance(no_results, str):
            raise ConfigError(f"agent.no_results must be a string, got {no_results!r}")
        if invalid is not None and not isinstance(invalid, str):
            raise ConfigError(f"agent.invalid must be a string, or null to end the task at a turn without a tag, "
                              f"got {invalid!r}")
        if not isinstance(strip_results, bool):
            raise ConfigError(f"agent.strip_results={strip_results!r} must be true or false")
        if stop is None:
            stops = tuple(dict.fromkeys(t.close for t in tags))
        elif isinstance(stop, list | tuple) and stop and all(isinstance(s, str) and s for s in stop):
            stops = tuple(stop)
        else:
            raise ConfigError(f"agent.stop={stop!r} must be a list of strings, or null for the closing tags")
        return cls(
            instruction=Template(instruction, "agent.instruction", ["question"], required=["question"]),
            tags=tuple(tags),
            information=Template(information, "agent.information", ["results"], required=["results"]),
            passage=Template(passage, "agent.passage", ["i", "title", "text", "id"]),
            strip_results=strip_results, no_results=no_results, invalid=invalid, stop=stops,
        )

    @property
    def searches(self) -> tuple[Tag, ...]:
        return self.tags[:-1]

    def routes(self, tool_specs: list[dict[str, Any]], top_k: int | None) -> dict[Tag, tuple[str, bool]]:
        """Per search tag, the tool it calls and whether `top_k` is passed; a tag the offered tools cannot serve is
        a `ConfigError` naming the offered ones."""
        offered = query_functions(tool_specs)
        names = [f["name"] for f in offered]
        every = ", ".join(str((s.get("function") or s).get("name")) for s in tool_specs) or "none"
        routes = {}
        for i, tag in enumerate(self.searches):
            if tag.tool is None and not offered:
                raise ConfigError(f"agent.searches[{i}] ({tag.open}) calls the mode's first search tool, but the "
                                  f"gateway offers none taking a string query (offered: {every}); pick a mode "
                                  "with a search tool, e.g. mode=sparse")
            function = offered[0] if tag.tool is None else next((f for f in offered if f["name"] == tag.tool), None)
            if function is None:
                raise ConfigError(f"agent.searches[{i}].tool={tag.tool} ({tag.open}) is not a search tool the gateway "
                                  f"offers; its search tools: {', '.join(names) or 'none'} (all tools: {every})")
            takes_top_k = "top_k" in ((function.get("parameters") or {}).get("properties") or {})
            if top_k is not None and not takes_top_k:
                raise ConfigError(f"{function['name']} takes no top_k, so agent.top_k={top_k} cannot be "
                                  "honoured: set agent.top_k=null")
            routes[tag] = (function["name"], top_k is not None)
        return routes

    def parse(self, text: str) -> Step:
        """The turn's first complete action: the earliest closing tag with its opening tag before it (the nearest
        one, when tags share a closing string); the content is what lies between them."""
        best: tuple[int, int, Tag] | None = None
        for tag in self.tags:
            end = text.find(tag.close)
            while end != -1 and (start := text.rfind(tag.open, 0, end)) == -1:
                end = text.find(tag.close, end + 1)
            if end != -1 and (best is None or (end, -start) < (best[0], -best[1])):
                best = (end, start, tag)
        if best is None:
            return Step("invalid", text)
        end, start, tag = best
        content = text[start + len(tag.open):end].strip()
        return Step("answer" if tag.answers else "search", text[:end + len(tag.close)], content, tag)

    def restore_stop(self, text: str, finish_reason: str | None, stop: str | None, names_stop: bool) -> str:
        """The reply's text with the closing tag put back when the server stopped at it and dropped it (vLLM and
        SGLang drop a matched stop string unless asked to keep it; some servers keep it)."""
        if finish_reason != "stop":
            return text  # cut at the token limit, or ended otherwise: nothing was dropped
        closes = {t.close for t in self.tags if t.close in self.stop}
        if names_stop:  # the server said which stop matched (None: the end-of-sequence token)
            return text + stop if stop in closes and not text.endswith(stop) else text
        # It did not say: a reply that ends inside an opened tag stopped at that tag's closing string.
        opened = max(((text.rfind(t.open), t) for t in self.tags if t.close in closes), key=lambda p: p[0],
                     default=(-1, None))
        start, tag = opened
        if tag is None or start == -1 or text.find(tag.close, start) != -1:
            return text
        return text + tag.close

    def observation(self, result: ToolResult) -> str:
        """What is appended after a search: its passages (or the tool's error text) in the result template."""
        hits = result_hits(result.structured) if result.ok else None
        if hits is not None:
            if not hits:
                return self.information(results=self.no_results)
            body = "".join(self.passage(i=str(i), title=h.title or "", text=h.text or "", id=h.id or "")
                           for i, h in enumerate(hits, 1))
        else:  # an error, or a tool whose result is not a passage list: its text as the model would read it
            body = result.text
        return self.information(results=body.strip() if self.strip_results else body)


def _tag(value: Any, key: str, *, search: bool) -> Tag:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}={value!r} must be a mapping with open and close strings")
    allowed = {"open", "close", "tool"} if search else {"open", "close"}
    if unknown := sorted(set(value) - allowed):
        raise ConfigError(f"{key} has unknown key(s) {unknown}; it takes {sorted(allowed)}")
    open_, close, tool = value.get("open"), value.get("close"), value.get("tool")
    for part, text in (("open", open_), ("close", close)):
        if not isinstance(text, str) or not text:
            raise ConfigError(f"{key}.{part}={text!r} must be a non-empty string")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise ConfigError(f"{key}.tool={tool!r} must be a tool name, or null for the mode's first query tool")
    return Tag(open_, close, tool, answers=not search)
