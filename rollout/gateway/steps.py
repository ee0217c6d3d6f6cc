"""The RAG pipeline's steps as gateway operations: retrieve, filter, chunk, generate, search sources, visualise.

An agent calls them one by one (the `rag_pipeline.json` gateway file); each works on source documents
(`Passage.source_id`) of the gateway's knowledge base:

- retrieve: documents ranked by one index, with their size in tokens, no text;
- filter: a 0-10 relevance score per document. With an LLM endpoint (the run's `llm:` block) the model
  scores each document, as a relevance filter over long contexts does, and its tokens are counted against
  the call (a reply cut at its token limit, `finish_reason` length, is counted in the call's accounting,
  `llm_truncated`). Offline, the bundled encoder scores it: the best cosine similarity between the query and the
  document's passages, mapped linearly so that a cosine of `COSINE_ZERO` or less is 0 and `COSINE_TEN` or
  more is 10 (0.45 is 5), rounded. On the demo knowledge base a gold document's median cosine is 0.62
  (score 8) and a random document's 0.16 (score 0);
- chunk: the documents' passages cut into chunks, re-ranked against a query when one is given, within a
  budget of the gateway tokenizer's tokens (`rollout.retrieval.recall`);
- generate: an answer from the documents, by the LLM endpoint, or offline by an extractive reader
  (`rollout.question_reading`, the span of the asked-for kind that best matches the question);
  an LLM answer cut at its token limit is returned marked `truncated`;
- search sources: keyword search restricted to a sub-folder of a corpus made from a folder of files;
- the results of the calls above are remembered per task, so `visualize_doc_relevance` can show them.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout.events import CUT_AT_LIMIT
from rollout.gateway.metering import timed_llm_call
from rollout.relevance_view import RelevanceRow

if TYPE_CHECKING:
    from rollout.llm.settings import LLMSettings

COSINE_ZERO = 0.2
COSINE_TEN = 0.7
FILTER_DOC_TOKENS = 512
"""Tokens of each document an LLM filter reads (its best chunks for the query)."""
ANSWER_CONTEXT_TOKENS = 2000
"""Tokens of the documents a reader answers from (their best chunks for the query)."""
RECENT_TASKS = 4096
"""Tasks whose last results the gateway remembers for `visualize_doc_relevance`."""

FILTER_PROMPT = (
    "Rate how useful the document is for answering the question, from 0 (useless) to 10 (it answers it).\n"
    "Question: {query}\n\nDocument ({doc_id}):\n{text}\n\nReply with the number only."
)
ANSWER_SYSTEM = ("Answer the question from the documents only. Reply with a short final answer only (a name, "
                 "place, number or year); reply \"unknown\" when the documents do not say.")


@dataclass(frozen=True, slots=True)
class StepSettings:
    """How the gateway's step tools score and answer (gateway options `--llm-*`, `--no-offline-steps`)."""

    llm: LLMSettings | None = None
    """The chat-completions endpoint filter and generate use; None: offline scorer and reader."""
    offline: bool = True
    """Without an endpoint, score with the encoder and answer with the extractive reader; False makes
    those two tools answer with an error instead."""
    sources_root: Path | None = None
    """The folder a folder corpus was read from (`dataset.corpus.path=DIR`); paths given to
    `search_sources` are relative to it (an absolute path must be inside it)."""


@dataclass(slots=True)
class RecentResults:
    """The last scored document list of each task (bounded; the oldest task is forgotten first)."""

    capacity: int = RECENT_TASKS
    _rows: OrderedDict[tuple[Any, ...], tuple[str, str | None, list[RelevanceRow], float | None]] = field(
        default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, task: tuple[Any, ...] | None, source: str, query: str | None, rows: list[RelevanceRow],
                 scale: float | None = None) -> None:
        if task is None:
            return
        with self._lock:
            self._rows[task] = (source, query, rows, scale)
            self._rows.move_to_end(task)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)

    def last(self, task: tuple[Any, ...] | None) -> tuple[str, str | None, list[RelevanceRow], float | None] | None:
        if task is None:
            return None
        with self._lock:
            return self._rows.get(task)


def cosine_to_score(cosine: float) -> int:
    """The offline relevance score (0-10) of a query-document cosine similarity (see the module docstring)."""
    fraction = (cosine - COSINE_ZERO) / (COSINE_TEN - COSINE_ZERO)
    return round(10 * min(1.0, max(0.0, fraction)))


class EndpointFailed(RuntimeError):
    """The LLM endpoint a step tool asks failed for good (refused, or out of retries)."""


@dataclass(frozen=True, slots=True)
class StepReply:
    """One LLM reply a step tool reads."""

    text: str
    """The reply's content ("" when it has none)."""
    finish_reason: str | None
    """As the endpoint sent it (None when absent)."""

    @property
    def truncated(self) -> bool:
        """The endpoint cut the reply at its token limit: the text may stop mid-answer."""
        return self.finish_reason == CUT_AT_LIMIT


class StepLLM:
    """Chat-completions requests from a tool running on a worker thread, each counted against the tool call (its
    tokens, time and finish_reason: `CallAccounting.llm_truncated` counts the replies cut at their token limit)."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings

    def complete(self, requests: Sequence[list[dict[str, Any]]], *, model: str | None = None,
                 max_tokens: int | None = None) -> list[StepReply]:
        """The reply to each request (sent concurrently, on `model` or the configured one); `EndpointFailed` when
        one fails for good. A client per call: calls run on several threads, each in its own event loop."""
        from rollout.errors import LLMError
        from rollout.llm.chat_client import ChatClient, RetryPolicy

        settings = self.settings if not model else replace(self.settings, model=model)
        client = ChatClient(settings, RetryPolicy(max_retries=settings.max_retries))
        sampling: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}

        async def one(messages: list[dict[str, Any]]) -> StepReply:
            with timed_llm_call() as metered:
                completion = await client.complete(messages, sampling=sampling)
                metered.update(completion.usage or {}, finish_reason=completion.finish_reason)
            return StepReply(completion.content or "", completion.finish_reason)

        async def all_of() -> list[StepReply]:
            try:
                return list(await asyncio.gather(*(one(m) for m in requests)))
            finally:
                await client.aclose()

        try:
            return asyncio.run(all_of())
        except LLMError as e:
            raise EndpointFailed(f"the LLM endpoint failed: {e}") from e


_FIRST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")  # with its sign: "-3" is clamped to 0, not read as 3


def parse_score(reply: str) -> int | None:
    """The 0-10 score in an LLM's reply (its first number, clamped); None when it holds none."""
    match = _FIRST_NUMBER.search(reply)
    if match is None:
        return None
    return round(min(10.0, max(0.0, float(match.group(0)))))


def source_scope(root: Path | None, path: str | None) -> str | None:
    """The corpus-relative folder (or file) `path` names, POSIX-style, "" for the whole corpus; a ValueError
    (for the agent) for a path outside the corpus root or on a corpus that was not made from a folder."""
    raw = (path or "").strip()
    if raw in ("", ".", "./"):
        return ""
    if root is None:
        raise ValueError("this gateway's corpus was not made from a folder of files (dataset.corpus.path=DIR), "
                         "so search_sources takes no path: leave path out")
    if Path(raw).is_absolute():
        try:
            raw = Path(raw).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            raise ValueError(f"path {path!r} is outside the corpus root {root}; pass a path relative to it") from None
    scope = posixpath.normpath(raw.replace("\\", "/"))
    if scope == ".." or scope.startswith("../"):
        raise ValueError(f"path {path!r} is outside the corpus root; pass a path inside it, e.g. 'guides'")
    return "" if scope == "." else scope


def in_scope(doc_path: str, scope: str, recursive: bool) -> bool:
    """Whether a document (its corpus-relative path) is `scope` itself or inside it (directly, unless recursive)."""
    if not scope:
        return recursive or "/" not in doc_path
    if doc_path == scope:
        return True
    if not doc_path.startswith(scope + "/"):
        return False
    return recursive or "/" not in doc_path[len(scope) + 1:]
