"""`POST /retrieve`: the retrieval-server API RL trainers call, answered by the gateway's own indexes.

    POST /retrieve              (the gateway file's first query tool)
    POST /retrieve/dense        (rag_query), /retrieve/sparse (rag_query_sparse), /retrieve/hybrid (rag_query_hybrid)
    Content-Type: application/json
    X-Task-Id: step-12          (optional; every query's ledger record carries it)
    X-Rollout-Step: 12          (optional, an integer: the trainer's step, the ledger's `step`)
    X-Rollout-Traffic: train    (optional: the ledger's `traffic`)

The body picks the answer's shape. A list of `queries` (Search-R1, SkyRL, verl-tool):

    {"queries": ["who founded veltrix?", "where is kelmor?"], "topk": 3, "return_scores": true}

is answered as Search-R1's retrieval server answers it, one list per query, best first:

    {"result": [[{"document": {"id": "d1", "contents": "Veltrix Holdings\\nVeltrix ...", "title": "Veltrix Holdings",
                               "text": "Veltrix ..."}, "score": 12.3}, ...], [...]]}

and without `return_scores` each item is the bare document. One string `query` is what two clients send and
they read different keys: rLLM's search tool posts `{"query", "top_k"}` and reads `results`; SkyRL-gym's
`SearchToolGroup` posts `{"query", "topk", "return_scores": true}` and reads `result` as Search-R1's list of lists.
So one query is answered with both, the same hits in each:

    {"result": [[{"document": {...}, "score": 12.3}, ...]],
     "results": [{"id": "d1", "content": "Veltrix Holdings\\nVeltrix ...", "score": 12.3, "document": {...}}, ...]}

`result` is Search-R1's answer to `{"queries": [query]}` (scores as `return_scores` asks); `results` is rLLM's
flat list, every item with its score.
`contents` and `content` are `title\\ntext`, as in a FlashRAG corpus; `document` (the same object as Search-R1's)
is there for rLLM's earlier search example, which read `document.contents`. `topk`, `top_k` or `k` name the depth:
a missing or null one is the gateway's `--default-top-k`; above `--max-top-k` is refused. When the gateway file pins
`top_k` for the query tool (`fixed_params`), the pin wins over the request's, as it wins over an MCP client's
`top_k`: two arms compared at a pinned depth stay at that depth whatever a trainer sends. The response header
`X-Top-K` says the depth used.

A request of N queries is one call to the index (one encode and one faiss search for a dense one), run on a
worker thread the route holds of its own pool (`threads_per_group` slots per retriever, apart from the MCP
tools' pools), so the event loop stays free and a flood of trainer queries cannot take the tools' slots.
Each query is one line of `tool_stats/realtime_calls.jsonl` under the query tool's name, marked
`"via": "retrieve"`, with the request's latency (its wait in the queue included) and the ids it returned.

At most `max_pending` queries are in flight at once (`--retrieve-max-pending`, default 4096). A request that
would go over waits its turn, first come first served (`rollout.gateway.retrieve_queue`), for at most
`max_wait_s` (`--retrieve-max-wait-s`, default 300 s); one still waiting then is answered 429 with
`Retry-After`. Search-R1's client neither retries nor (in its own code) times out: a refusal fails the training
step, so the gateway waits for it instead, bounded so that a gateway far too slow for its load says so. A
request whose client goes away while it waits leaves the queue. So a query is either answered and recorded
once or refused whole with its request, never dropped. The route gets the proxy's Host/Origin checks and the
gateway's bearer token; its body may be up to `MAX_BODY_BYTES` (32 MiB: 2,560 queries of the longest
`max_query_chars` fit even with every character written as a `\\uXXXX` escape, as Python's `json` and `requests`
write non-ASCII text).

| status | when |
|---|---|
| 200 | `{"result": [...]}` for `queries`; `{"result": [[...]], "results": [...]}` for one `query` |
| 400 | the body is not a JSON object, an unknown key, a bad `topk`, empty `queries`, `queries` and `query` both, a bad query (empty, too long, or holding a lone surrogate such as `"\\ud800"`), an `X-Rollout-Step` that is not an integer |
| 403 / 421 | the Origin / Host header is not one this gateway serves |
| 404 | the gateway serves no query tool, or not the one the path names |
| 413 | the body is over `MAX_BODY_BYTES`, or holds more queries than `max_pending` |
| 415 | the Content-Type is not JSON |
| 429 | still waiting for its turn after `max_wait_s`; retry after `Retry-After` seconds |
| 500 | the index failed (its queries are recorded with outcome `tool_error`) |
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway.retrieve_queue import QueryQueue
from rollout.gateway.retrieve_request import LedgerMarks, Refused, RetrieveRequest, parse_request
from rollout.gateway.stats import CallStat, StatsCollector, ledger_lines
from rollout.gateway.tool_params import _on_daemon_thread
from rollout.mcp_client.transport import describe
from rollout.records import Passage

logger = logging.getLogger(__name__)

RETRIEVE_ROUTE = "/retrieve"
RETRIEVER_ROUTE = "/retrieve/{retriever}"
VIA = "retrieve"
"""The ledger's `via` marker of a query made through this route."""
QUERY_TOOLS: dict[str, str] = {
    "query_knowledge_base_dense": "dense",
    "query_knowledge_base_sparse": "sparse",
    "query_knowledge_base_hybrid": "hybrid",
}
"""The query tools `/retrieve` answers for, by tool name: the retriever each searches (its `/retrieve/{kind}` path)."""
DEFAULT_MAX_PENDING = 4096
"""Queries in flight before a request waits its turn: one 2,560-query request of Search-R1's (512 prompts x 5
samples) and room beside it."""
DEFAULT_MAX_WAIT_S = 300.0
"""How long a request may wait for its turn before a 429. A request waits for the ones ahead of it: with four
trainers posting 2,560 queries each to the demo's dense index on two shared cores, the slowest waited and ran
63 s (bench/retrieve_trainers.py). Five minutes is well past that, and short of letting a gateway too slow for its
load hang its trainers' steps forever."""
RETRY_AFTER_S = 1
DOCUMENT_CACHE_SIZE = 100_000
"""Passages whose answer JSON is kept (a few hundred bytes each)."""
MAX_BODY_BYTES = 32 * 1024 * 1024
"""2,560 queries of 2,000 characters each (`KnowledgeBase.max_query_chars`) written with every character a `\\uXXXX`
escape (6 bytes: Python's `json` and `requests` write non-ASCII text so) are 30.7 MB."""


@dataclass(slots=True)
class QueryRoute:
    """One query tool as `/retrieve` serves it."""

    tool: str
    """The MCP tool's name: the ledger's `tool_name`."""
    retriever: str
    pins: Mapping[str, Any]
    """The tool's `fixed_params` (a pinned `top_k` or `query` wins over the request's)."""
    limiter: anyio.CapacityLimiter


Ranked = list[list[tuple[int, float]]]
"""Per query, its (passage row, score) pairs best first (`KnowledgeBase.search_rows`)."""


def document(passage: Passage) -> dict[str, str]:
    """A passage as Search-R1's server returns a corpus row: `contents` is `title\\ntext`, as in FlashRAG corpora."""
    return {"id": passage.id, "contents": f"{passage.title}\n{passage.text}", "title": passage.title,
            "text": passage.text}


class DocumentCache:
    """Each passage's `document` as JSON, made once: a trainer's queries return the same passages again and
    again, and encoding them was most of a large answer's cost. The most recent `size` passages are kept."""

    def __init__(self, passages: Sequence[Passage], size: int = DOCUMENT_CACHE_SIZE):
        self._passages = passages
        self.json = functools.lru_cache(maxsize=size)(self._encode)

    def _encode(self, row: int) -> str:
        return json.dumps(document(self._passages[row]))


def answer_body(ranked: Ranked, return_scores: bool, documents: DocumentCache) -> bytes:
    """`{"result": [...]}` as Search-R1 answers: per query its documents, each with its score when asked.
    Written from the cached document JSON; a score is written as `json.dumps` writes a float."""
    if return_scores:
        lists = (",".join(f'{{"document": {documents.json(row)}, "score": {float.__repr__(score)}}}'
                          for row, score in rows) for rows in ranked)
    else:
        lists = (",".join(documents.json(row) for row, _ in rows) for rows in ranked)
    return ('{"result": [' + ", ".join(f"[{items}]" for items in lists) + "]}").encode()


def one_query_answer_body(rows: list[tuple[int, float]], return_scores: bool, documents: DocumentCache,
                          passages: Sequence[Passage]) -> bytes:
    """`{"result": [[...]], "results": [...]}`: Search-R1's answer to one query (SkyRL-gym's search tool reads it)
    beside rLLM's flat list, each of whose items has its passage's `id`, `content` (`title\\ntext`), `score` (what
    rLLM's search tool reads) and the `document` Search-R1 answers with."""
    results = []
    for row, score in rows:
        doc = document(passages[row])
        results.append({"id": doc["id"], "content": doc["contents"], "score": score, "document": doc})
    search_r1 = answer_body([rows], return_scores, documents)
    return search_r1[:-1] + b', "results": ' + json.dumps(results).encode() + b"}"


@dataclass(slots=True)
class RetrieveApi:
    """The `/retrieve` routes of one gateway: its query tools in gateway-file order, the first answering `/retrieve`."""

    kb: KnowledgeBase
    routes: list[QueryRoute]
    collector: StatsCollector | None = None
    max_pending: int = DEFAULT_MAX_PENDING
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    queue: QueryQueue = field(init=False)
    """The queries in flight and the requests waiting for their turn."""
    _security: TransportSecurityMiddleware = field(default_factory=lambda: TransportSecurityMiddleware(None))
    _documents: DocumentCache | None = None

    def __post_init__(self) -> None:
        self._documents = DocumentCache(self.kb.passages)
        if isinstance(self.max_pending, bool) or not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ConfigError(f"--retrieve-max-pending must be a positive number of queries, got {self.max_pending!r}")
        wait = self.max_wait_s
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:  # NaN too
            raise ConfigError(f"--retrieve-max-wait-s must be a number of seconds, 0 or more, got {self.max_wait_s!r}")
        self.queue = QueryQueue(self.max_pending, float(self.max_wait_s))

    @classmethod
    def for_tools(cls, kb: KnowledgeBase, tools: Sequence[tuple[str, Mapping[str, Any]]], threads: int,
                  collector: StatsCollector | None = None, max_pending: int = DEFAULT_MAX_PENDING,
                  max_wait_s: float = DEFAULT_MAX_WAIT_S) -> RetrieveApi:
        """The routes of the served tools (name, pinned params) that are query tools; `threads` worker slots each."""
        routes = [QueryRoute(name, QUERY_TOOLS[name], dict(pins), anyio.CapacityLimiter(threads))
                  for name, pins in tools if name in QUERY_TOOLS]
        return cls(kb, routes, collector, max_pending, max_wait_s)

    def protect(self, security: TransportSecuritySettings | None) -> None:
        """Check Host/Origin as the app's MCP transport does."""
        self._security = TransportSecurityMiddleware(security)

    async def handle(self, request: Request) -> Response:
        started, t0 = time.time(), time.perf_counter()
        try:
            route = self._route(request.path_params.get("retriever"))
            await self._check_headers(request)
            marks = LedgerMarks.of(request.headers)
            parsed = parse_request(await _body(request), self.kb.max_top_k)
            queries = [self._query(route, i, q) for i, q in enumerate(parsed.queries)]
            await self._admit(request, len(queries))
        except Refused as e:
            return JSONResponse({"error": str(e)}, status_code=e.status, headers=e.headers)
        except _ClientGone:
            logger.debug("A /retrieve client went away while its %d queries waited their turn", len(queries))
            return Response(status_code=499)  # nobody reads it: the connection is closed
        try:
            return await self._answer(route, queries, parsed, marks, started, t0)
        finally:
            self.queue.release(len(queries))

    async def _answer(self, route: QueryRoute, queries: list[str], parsed: RetrieveRequest, marks: LedgerMarks,
                      started: float, t0: float) -> Response:
        k = route.pins.get("top_k", parsed.topk)
        k = self.kb.default_top_k if k is None else k
        work = functools.partial(self._work, route, queries, k, parsed, marks, started, t0)
        try:
            async with route.limiter:
                body, lines = await _on_daemon_thread(work)
        except Exception as e:  # the index failed: its queries are recorded, the trainer told
            logger.warning("/retrieve on the %s index failed: %s", route.retriever, describe(e))
            if self.collector is not None:
                self.collector.append(ledger_lines(self._stats(route, queries, marks, started, t0, None,
                                                               f"{type(e).__name__}: {e}")))
            return JSONResponse({"error": f"the {route.retriever} index failed: {describe(e)}"}, status_code=500)
        if self.collector is not None:
            self.collector.append(lines)
        return Response(body, media_type="application/json", headers={"X-Top-K": str(k)})

    def _work(self, route: QueryRoute, queries: list[str], k: int, parsed: RetrieveRequest, marks: LedgerMarks,
              started: float, t0: float) -> tuple[bytes, str]:
        """On a worker thread: one search of the index for all the queries, then the answer and its ledger lines
        (for hundreds of queries, milliseconds of JSON the event loop does not wait for)."""
        assert self._documents is not None
        _, ranked = self.kb.search_rows(route.retriever, queries, k)
        if parsed.shape == "one_query":
            body = one_query_answer_body(ranked[0], parsed.return_scores, self._documents, self.kb.passages)
        else:
            body = answer_body(ranked, parsed.return_scores, self._documents)
        return body, ledger_lines(self._stats(route, queries, marks, started, t0, ranked, None))

    def _route(self, retriever: str | None) -> QueryRoute:
        if not self.routes:
            raise Refused(404, "this gateway serves no query tool: add rag_query_sparse (or rag_query, "
                               "rag_query_hybrid) to a rag module of its gateway file to serve /retrieve")
        if retriever is None:
            return self.routes[0]
        for route in self.routes:
            if route.retriever == retriever:
                return route
        served = ", ".join(f"/retrieve/{r.retriever}" for r in self.routes)
        raise Refused(404, f"this gateway serves no {retriever} query tool at /retrieve/{retriever}; it serves {served}")

    async def _check_headers(self, request: Request) -> None:
        if (problem := await json_request_problem(self._security, request)) is not None:
            raise Refused(*problem)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise Refused(413, _TOO_LARGE)

    def _query(self, route: QueryRoute, i: int, query: str) -> str:
        try:
            return self.kb.check_query(route.pins.get("query", query))
        except ValueError as e:
            raise Refused(400, f"queries[{i}]: {e}") from None

    async def _admit(self, request: Request, n: int) -> None:
        """Count `n` queries in flight, at once or after waiting their turn: 413 when they could never fit, 429
        when their turn has not come after `max_wait_s`, `_ClientGone` when the client left while they waited."""
        if n > self.max_pending:
            raise Refused(413, f"{n} queries in one request, over this gateway's {self.max_pending} in flight "
                               "(--retrieve-max-pending): split the request or raise the bound")
        admission = await self.queue.acquire(n, functools.partial(_client_gone, request))
        if admission == "gone":
            raise _ClientGone
        if admission == "timed_out":
            logger.warning("/retrieve refused %d queries that waited %g s for their turn (--retrieve-max-wait-s)",
                           n, self.max_wait_s)
            raise Refused(429, f"{n} queries waited {self.max_wait_s:g} s for their turn behind {self.queue.in_flight} "
                               f"in flight (at most {self.max_pending} at once, --retrieve-max-pending): retry after "
                               f"{RETRY_AFTER_S} s, or let requests wait longer with --retrieve-max-wait-s",
                          {"Retry-After": str(RETRY_AFTER_S)})

    def _stats(self, route: QueryRoute, queries: list[str], marks: LedgerMarks, started: float, t0: float,
               ranked: Ranked | None, error: str | None) -> list[CallStat]:
        """One ledger record per query, each with the request's latency so far."""
        duration_ms = (time.perf_counter() - t0) * 1000.0
        passages = self.kb.passages
        return [
            CallStat(
                call_id=f"{marks.call_id}:{i}", tool_name=route.tool, task_id=marks.task_id,
                worker_id=marks.worker_id, ok=error is None,
                outcome="ok" if error is None else "tool_error", error=error, duration_ms=duration_ms,
                timestamp=started, result_ids=[] if ranked is None else [passages[row].id for row, _ in ranked[i]],
                attempt=marks.attempt, via=VIA, traffic=marks.traffic, step=marks.step,
            )
            for i in range(len(queries))
        ]


class _ClientGone(Exception):
    """The client closed its connection while its request waited for its turn."""


async def json_request_problem(security: TransportSecurityMiddleware, request: Request) -> tuple[int, str] | None:
    """The status and message of the refusal a gateway's JSON route owes `request` by its headers (a Host or Origin
    the gateway does not serve, a body that is not JSON); None when they pass."""
    refused = await security.validate_request(request, is_post=False)
    if refused is not None:
        return refused.status_code, (f"{bytes(refused.body).decode()}: this gateway answers only requests addressed "
                                     "to it by its loopback name, from no other web origin")
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        return 415, "send the body with 'Content-Type: application/json'"
    return None


async def _client_gone(request: Request) -> None:
    """Return once the client has closed its connection. The body has been read, so the next message the server
    has for this request is its disconnect."""
    try:
        while (await request.receive()).get("type") != "http.disconnect":
            await anyio.sleep(0.1)  # a server that answers at once with an empty body: ask again, without spinning
    except Exception as e:  # noqa: BLE001 - a server that cannot say: the request waits for its turn alone
        logger.debug("Cannot watch a waiting /retrieve client for its disconnect: %s", describe(e))
        await anyio.sleep_forever()


_TOO_LARGE = f"the body is over {MAX_BODY_BYTES} bytes: split the queries over several requests"


async def _body(request: Request) -> bytes:
    """The request body; a `Refused` (413) once more than `MAX_BODY_BYTES` arrive, whatever Content-Length said."""
    received = bytearray()
    async for chunk in request.stream():
        received.extend(chunk)
        if len(received) > MAX_BODY_BYTES:
            raise Refused(413, _TOO_LARGE)
    return bytes(received)
