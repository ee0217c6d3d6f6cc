"""A `/retrieve` request read: its body checked into a `RetrieveRequest` (Search-R1's `queries`, rLLM's one `query`),
its headers into the marks of its ledger records; `Refused` answers what cannot be read with a status and a line
naming the fix."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from starlette.datastructures import Headers

from rollout.gateway.encodable import lone_surrogate
from rollout.gateway.proxy import HEADER_ATTEMPT, HEADER_CALL_ID, HEADER_TASK_ID, HEADER_WORKER_ID
from rollout.wire import HEADER_STEP, HEADER_TRAFFIC

_QUERY_KEYS = ("queries", "query")


_TOPK_KEYS = ("topk", "top_k", "k")


_KEYS = (*_QUERY_KEYS, *_TOPK_KEYS, "return_scores")


AnswerShape = Literal["search_r1", "one_query"]
"""Search-R1's `{"result": [[...], ...]}` (for `queries`), or for one `query` that and rLLM's `{"results": [...]}`
side by side (SkyRL-gym reads the first, rLLM the second)."""


_EXAMPLE = 'e.g. {"queries": ["..."], "topk": 3, "return_scores": true}'


class Refused(Exception):
    """A request answered with `status` and a one-line `error` before any query ran."""

    def __init__(self, status: int, error: str, headers: Mapping[str, str] | None = None):
        super().__init__(error)
        self.status = status
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class RetrieveRequest:
    """A checked `/retrieve` body."""

    queries: list[str]
    topk: int | None
    """None: the gateway's default (or the pinned top_k)."""
    return_scores: bool
    """Search-R1's `result` only: each item `{"document", "score"}` rather than the bare document. rLLM's `results`
    always has the scores."""
    shape: AnswerShape = "search_r1"
    """Both answers for a request of one string `query`, Search-R1's for a list of `queries`."""


@dataclass(frozen=True, slots=True)
class LedgerMarks:
    """What a request's headers say of its queries, for their ledger records."""

    call_id: str
    """`X-Call-Id`, or a new id: query i of the request is recorded as `CALL_ID:i`."""
    task_id: str | None
    worker_id: str | None
    attempt: int | None
    traffic: str | None
    """`X-Rollout-Traffic` (e.g. "train"); None when not sent."""
    step: int | None
    """`X-Rollout-Step`, the trainer's step number; None when not sent."""

    @classmethod
    def of(cls, headers: Headers) -> LedgerMarks:
        """The marks of `headers`; a `Refused` (400) for an `X-Rollout-Step` that is not an integer."""
        step = headers.get(HEADER_STEP)
        if step is not None:
            try:
                step = int(step)
            except ValueError:
                raise Refused(400, f"the {HEADER_STEP} header must be an integer (the trainer's step number), "
                                   f"got {step!r}") from None
        attempt = headers.get(HEADER_ATTEMPT)
        return cls(call_id=headers.get(HEADER_CALL_ID) or uuid.uuid4().hex, task_id=headers.get(HEADER_TASK_ID),
                   worker_id=headers.get(HEADER_WORKER_ID),
                   attempt=int(attempt) if attempt and attempt.isdigit() else None,
                   traffic=headers.get(HEADER_TRAFFIC) or None, step=step)


def parse_request(raw: bytes, max_top_k: int) -> RetrieveRequest:
    """The body as a `RetrieveRequest`; a `Refused` (400) names what to fix."""
    try:
        body = json.loads(raw) if raw.strip() else None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Refused(400, f"the body is not JSON ({e}): send {_EXAMPLE}") from None
    if not isinstance(body, dict):
        raise Refused(400, f"the body must be a JSON object: send {_EXAMPLE}")
    unknown = [key for key in body if key not in _KEYS]
    if unknown:
        raise Refused(400, f"unknown key {unknown[0]!r}: send queries (or query), topk (or top_k, k) and return_scores")
    if all(key in body for key in _QUERY_KEYS):
        raise Refused(400, "send queries (a list) or query (one string), not both")
    shape: AnswerShape = "search_r1"
    if "query" in body:
        if not isinstance(body["query"], str):
            raise Refused(400, "query must be one string; send several as queries: [...]")
        queries, shape = [body["query"]], "one_query"
    elif "queries" in body:
        queries = body["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise Refused(400, "queries must be a list of strings")
        if not queries:
            raise Refused(400, "queries is empty: send at least one query")
    else:
        raise Refused(400, f"no queries: send {_EXAMPLE}")
    found = lone_surrogate(queries)
    if found is not None:  # the index's encoder, the ledger and the answer could not write it
        where = "query" if shape == "one_query" else found.where("queries")
        raise Refused(400, f"{where} {found.describe()}")
    named = [key for key in _TOPK_KEYS if key in body]
    if len(named) > 1:
        raise Refused(400, f"send one of {', '.join(named)}, not several")
    topk = body[named[0]] if named else None
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_top_k):
        raise Refused(400, f"{named[0]} must be an integer from 1 to {max_top_k} (the gateway's max_top_k), got {topk!r}")
    scores = body.get("return_scores", False)
    if not isinstance(scores, bool):
        raise Refused(400, f"return_scores must be true or false, got {scores!r}")
    return RetrieveRequest(queries, topk, scores, shape)
