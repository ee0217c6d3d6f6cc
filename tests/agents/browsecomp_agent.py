"""A stand-in for a deep-research model on BrowseComp-Plus' tools: it searches, reads, and answers in its format.

Served as the scripted chat-completions server is (`tests.agents.chat_server`), so `agent=openai` talks to it over
HTTP exactly as to vLLM. Its policy reads only what a model reads (the question, the tools offered, the tool
results), never a gold answer:

1. search with the question, once with each search tool offered (`search`, or `search_bm25` then `search_dense`);
2. read the documents those searches listed, best first (the first search's first), with `get_document`, until one
   states "The <attribute> of the <entity> is <answer>." for the question "What is the <attribute> of the
   <entity>?", or three were read;
3. answer "Explanation: ... [docid]" / "Exact Answer: ..." / "Confidence: ...", citing the document it read the
   answer in (or "Exact Answer: unknown" with a low confidence when none said it).

The preflight requests `agent=openai` makes (one without tools, one offering a single tool) are answered too.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import uvicorn

from rollout.listen import bind_socket
from tests.agents.chat_server import ChatServer, Reply, answer, tool_calls, usage
from tests.gateway.loopback import serving

_QUESTION = re.compile(r"What is the (.+) of the (.+)\?")
MAX_READS = 3


def tool_exchanges(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool name, arguments, result text) of each call made so far, in order."""
    results = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m.get("role") == "tool"}
    return [(call["function"]["name"], json.loads(call["function"]["arguments"] or "{}"), results.get(call["id"], ""))
            for m in messages if m.get("role") == "assistant" for call in m.get("tool_calls") or []]


def policy(body: dict[str, Any]) -> Reply:
    """The next reply to a chat-completions request (see the module docstring)."""
    messages = body.get("messages") or []
    offered = [tool["function"]["name"] for tool in body.get("tools") or []]
    question = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    done = tool_exchanges(messages)
    if body.get("tool_choice") == "none" or not offered:
        return _final(question, done)
    searched = {name for name, _, _ in done}
    for name in (n for n in offered if n.startswith("search")):
        if name not in searched:
            return tool_calls((name, {"query": question}))
    if _found(question, done) is None and "get_document" in offered:
        read = [args.get("docid") for name, args, _ in done if name == "get_document"]
        listed = [hit["docid"] for name, _, text in done if name.startswith("search") for hit in _hits(text)]
        unread = [d for d in dict.fromkeys(listed) if d not in read]
        if unread and len(read) < MAX_READS:
            return tool_calls(("get_document", {"docid": unread[0]}))
    return _final(question, done)


def _hits(text: str) -> list[dict[str, Any]]:
    try:
        hits = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [h for h in hits if isinstance(h, dict) and "docid" in h] if isinstance(hits, list) else []


def _found(question: str, done: list[tuple[str, dict[str, Any], str]]) -> tuple[str, str] | None:
    """(answer, docid) when a document read states what the question asks."""
    asked = _QUESTION.search(question)
    if asked is None:
        return None
    attribute, entity = asked.groups()
    fact = re.compile(rf"The {re.escape(attribute)} of the {re.escape(entity)} is ([^.]+)\.")
    for name, args, text in done:
        if name == "get_document":
            try:
                document = json.loads(text)
            except json.JSONDecodeError:
                continue
            stated = fact.search(str(document.get("text", "")))
            if stated is not None:
                return stated.group(1), str(args.get("docid"))
    return None


def _final(question: str, done: list[tuple[str, dict[str, Any], str]]) -> Reply:
    found = _found(question, done)
    if found is None:
        return answer("Explanation: No document I read says it.\nExact Answer: unknown\nConfidence: 5%")
    value, docid = found
    asked = _QUESTION.search(question)
    assert asked is not None
    return answer(f"Explanation: The {asked.group(1)} of the {asked.group(2)} is {value} [{docid}].\n"
                  f"Exact Answer: {value}\nConfidence: 90%")


class DeepResearchServer(ChatServer):
    """The scripted server with `policy` in place of its default one (a pushed reply still comes first)."""

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        reply = policy(body)
        if isinstance(reply.body, dict):  # a served model's usage counts its prompt: about 4 characters a token
            reply.body["usage"] = usage(prompt=len(json.dumps(body.get("messages") or [])) // 4)
        return reply


@contextlib.contextmanager
def deep_research_server() -> Iterator[DeepResearchServer]:
    """Serve a `DeepResearchServer` on a free loopback port; its `base_url` ends in `/v1`."""
    state = DeepResearchServer()
    uv = uvicorn.Server(uvicorn.Config(state.app(), log_level="warning", timeout_graceful_shutdown=1))
    with serving(uv, bind_socket("127.0.0.1", 0)) as base:
        state.base_url = f"{base}/v1"
        yield state
