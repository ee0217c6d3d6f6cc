"""How the LLM endpoint served a run's requests: how many at once, at what throughput, and how long they queued.

A llama.cpp server started without `--parallel` has one slot: eight workers' requests wait for it in turn, and each
task's "LLM time" is mostly queueing. This measures it from the requests' own timings, which every agent request's
`LLMOutputEvent` carries (`sent`, `request_ms`, `usage`, and `server_ms` when the server reports its own time):

- **sent at once**: the most requests in flight together as the client saw them, each request being its answered
  attempt, from `sent` to `sent + request_ms`.
- **completion tokens/s**: the requests' completion tokens over the time at least one of them was in flight (the
  union of their intervals): the throughput the run got from the endpoint.
- **served at once**, with the server's timings (llama.cpp's server adds `timings` to each response): a request's
  server interval is the last `server_ms` before it ended, and the most such intervals that overlap is how many the
  server worked on together (counting overlaps of their middle halves, `TRIM`). What each request spent
  outside it (`request_ms - server_ms`) it was queued; `queued_share` is that over all LLM time.
- **served at once**, without them (vLLM, SGLang, OpenAI, llama-cpp-python send none): not measured. From the client a
  server that answers one request at a time at full speed and one that answers several together at a share of it
  each look alike in throughput, and a request's time mixes its queueing, its prompt and its reply: an estimate from
  them (the throughput over the fastest request's rate, say) put llama-cpp-python's one-at-a-time server at "about 2"
  on a real model. The line says so, and names the servers that report their timings.

Records written before requests carried their timings add nothing; a run without timed requests gets no measure.
"""

from __future__ import annotations

from array import array

import numpy as np

from rollout.events import LLMOutputEvent
from rollout.records import TaskResult
from rollout.summary import EndpointLoad

TRIM = 0.25
"""Each server interval is taken in by this share of its length at both ends before overlaps are counted, so that
two requests count as served together when their middle halves overlap. The server's interval is placed by the
client's clock, whose reading of its end comes late by the response's trip back and by a busy client's scheduling
(tens of milliseconds on a loaded machine): that must not make two requests a one-slot server answered back to back
look concurrent, while requests a server's slots serve together overlap for most of their time."""
HINT = "llama.cpp: start it with --parallel N / -np N; vLLM/SGLang batch by themselves"
"""What the line adds when the endpoint serves at most half of what was sent at once."""
UNTIMED = ("llama.cpp's llama-server reports them; llama-cpp-python's server answers one request at a time; vLLM and "
           "SGLang batch the requests they are sent")
"""What the line says when the server reports no timings: what is known of the common servers."""


def starved(load: EndpointLoad) -> bool:
    """Whether the endpoint served at most half of what the run sent at once: more slots would go faster."""
    return load.served_at_once is not None and load.sent_at_once > 1 and load.served_at_once <= load.sent_at_once / 2


class EndpointTally:
    """The timed LLM requests of a run's records, added record by record (four numbers a request)."""

    def __init__(self) -> None:
        self._sent = array("d")
        self._request_s = array("d")
        self._tokens = array("d")
        self._server_s = array("d")
        """NaN where the server gave no timings."""

    def add(self, r: TaskResult) -> None:
        for e in r.events:
            if isinstance(e, LLMOutputEvent) and e.sent is not None and e.request_ms:
                self._sent.append(e.sent)
                self._request_s.append(e.request_ms / 1000)
                self._tokens.append(float((e.usage or {}).get("completion_tokens") or 0))
                self._server_s.append(np.nan if e.server_ms is None else e.server_ms / 1000)

    def summary(self) -> EndpointLoad | None:
        """The measure of the requests added; None without any."""
        if not self._sent:
            return None
        start, length = np.frombuffer(self._sent), np.frombuffer(self._request_s)
        end = start + length
        tokens, server = np.frombuffer(self._tokens), np.frombuffer(self._server_s)
        busy = _covered(start, end)
        throughput = float(tokens.sum()) / busy if busy > 0 and tokens.sum() > 0 else None
        sent = most_at_once(start, end)
        timed = not np.isnan(server).any()
        if timed:
            served: float | None = float(most_at_once(end - np.minimum(server, length), end, TRIM))
            queued: float | None = round(float(np.clip(length - server, 0.0, None).sum() / length.sum()), 4)
        else:
            served, queued = None, None
        return EndpointLoad(requests=len(start), sent_at_once=sent, served_at_once=served, timed_by_server=timed,
                            completion_tokens_per_s=None if throughput is None else round(throughput, 1),
                            queued_share=queued)


def most_at_once(start: np.ndarray, end: np.ndarray, trim: float = 0.0) -> int:
    """The most intervals [start, end) that overlap at one time, once each is taken in by `trim` of its length at
    both ends."""
    cut = trim * (end - start)
    times = np.concatenate([start + cut, end - cut])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    order = np.lexsort((steps, times))  # at one time, an end before a start: touching is not overlapping
    return int(np.cumsum(steps[order]).max()) if len(times) else 0


def _covered(start: np.ndarray, end: np.ndarray) -> float:
    """Seconds covered by at least one interval."""
    order = np.argsort(start, kind="stable")
    total, reach = 0.0, -np.inf
    for s, e in zip(start[order].tolist(), end[order].tolist(), strict=True):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def endpoint_line(load: EndpointLoad) -> str:
    """E.g. "LLM endpoint: at most 1 request at a time served of 8 sent concurrently; 109 completion tokens/s; ~70%
    of LLM time queued (llama.cpp: start it with --parallel N / -np N; vLLM/SGLang batch by themselves)"."""
    rate = "" if load.completion_tokens_per_s is None else f"; {load.completion_tokens_per_s:,.0f} completion tokens/s"
    if load.sent_at_once <= 1:
        return f"LLM endpoint: one request at a time sent, so how many it serves at once was not measured{rate}"
    if load.served_at_once is None:
        return (f"LLM endpoint: {load.sent_at_once} requests sent concurrently{rate}; how many it served at once is "
                f"not known: the server reports no timings ({UNTIMED})")
    n = int(load.served_at_once)
    line = f"LLM endpoint: at most {n} request{'s' if n != 1 else ''} at a time served of {load.sent_at_once} sent " \
           f"concurrently{rate}"
    if load.queued_share is not None:
        line += f"; ~{100 * load.queued_share:.0f}% of LLM time queued"
    return line + (f" ({HINT})" if starved(load) else "")
