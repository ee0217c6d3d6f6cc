"""Slow LLM requests, timeouts and retries: one warning line each where they happen, shown and counted by the run.

A server that makes every request slow (a grammar forcing tool arguments without `max_tokens`; one slot serving eight
workers in turn) used to leave a run silent for minutes: its timeouts and retries were debug lines. `ChatClient`
now logs each at WARNING with one of the leads below (`rollout.llm.chat_client`), in whatever process it runs:
a Ray worker's lines reach the driver through `rollout.ray_console`, in the run's one format.

In a run's driver, `watch_llm_trouble` puts an `LLMTroubleLog` on that logger for the run: it counts every such
line by its lead, lets the first `SHOWN_PER_KIND` of each kind through, then one at each tenfold count (10, 100,
1000...), so a run of 1,000 tasks prints a handful of lines, not 1,000. The progress line shows the counts
(`LLMTroubleLog.progress_text`) and the run's log ends with them (`LLMTroubleLog.final_line`). Elsewhere (a
gateway's step tools, a trainer's reward, `rollout judge` on its own) each line is shown.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Literal

SLOW_CALL_S = 30.0
"""An LLM request whose answered attempt took longer than this is logged as slow: past it a run of a few hundred
tasks takes hours, and the user should hear why while it runs."""
SHOWN_PER_KIND = 3
"""Lines of each kind a run shows before it only counts them."""
LOGGER = "rollout.llm.chat_client"
"""The logger the lines go to (`ChatClient`'s)."""

Kind = Literal["timeout", "retry", "slow"]
KINDS: tuple[Kind, ...] = ("timeout", "retry", "slow")

TIMEOUT_RETRYING = "LLM timeout, retrying:"
TIMEOUT_GIVING_UP = "LLM timeout, giving up:"
RETRYING = "LLM request failed, retrying:"
SLOW = "Slow LLM request:"
_LEADS: dict[str, tuple[Kind, ...]] = {
    TIMEOUT_RETRYING: ("timeout", "retry"),
    TIMEOUT_GIVING_UP: ("timeout",),
    RETRYING: ("retry",),
    SLOW: ("slow",),
}
"""Each line's lead → what it counts: a timeout that is retried is a timeout and a retry. A line's first kind decides
whether it is shown."""
_WORKER_PREFIX = re.compile(r"\[[^\]\n]*\] ")
"""`[worker-3] `: what `rollout.ray_console` puts before a forwarded line's message."""
_NAMES = {"timeout": ("LLM timeout", "LLM timeouts"), "retry": ("retry", "retries"),
          "slow": ("slow call", "slow calls")}


def retry_line(description: str, *, timeout: bool, retry: int, retries: int, wait_s: float) -> str:
    """The line of a failed attempt that is retried (`retry` of `retries`, after `wait_s`)."""
    lead = TIMEOUT_RETRYING if timeout else RETRYING
    return f"{lead} {description}; retry {retry} of {retries} in {wait_s:.1f} s"


def gave_up_line(description: str, *, attempts: int) -> str:
    """The line of a request whose last attempt timed out: the task fails with the `LLMError` this precedes."""
    return f"{TIMEOUT_GIVING_UP} {description}; gave up after {attempts} attempts (llm.max_retries)"


def slow_line(seconds: float, base_url: str, completion_tokens: int | None, threshold_s: float = SLOW_CALL_S) -> str:
    """The line of a request that was answered, in more than `threshold_s`."""
    tokens = "" if completion_tokens is None else f" for {completion_tokens} completion tokens"
    return (f"{SLOW} {seconds:.1f} s{tokens} from {base_url} (over {threshold_s:g} s). A server that serves one "
            "request at a time queues the others (the run's summary measures it: \"LLM endpoint\"), and one that "
            "writes tool arguments through a grammar without max_tokens may write until its context ends: set "
            "llm.sampling.max_tokens, and start llama.cpp with --parallel N")


def kinds_of(message: str) -> tuple[Kind, ...]:
    """What a logged message counts (none for any other line), with or without a forwarded line's `[worker]`."""
    text = message[m.end():] if (m := _WORKER_PREFIX.match(message)) else message
    for lead, kinds in _LEADS.items():
        if text.startswith(lead):
            return kinds
    return ()


def _tenfold(n: int) -> bool:
    """10, 100, 1000...: the counts at which a kind's line is shown again."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class LLMTroubleLog(logging.Filter):
    """Counts the LLM trouble lines logged through the logger it filters, and lets few of them through.

    Thread-safe: Ray hands forwarded lines to the driver's logging on a thread of its own."""

    def __init__(self, shown_per_kind: int = SHOWN_PER_KIND) -> None:
        super().__init__()
        self.shown_per_kind = shown_per_kind
        self.counts: Counter[Kind] = Counter()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kinds = kinds_of(record.getMessage())
        if not kinds:
            return True
        with self._lock:
            self.counts.update(kinds)
            n = self.counts[kinds[0]]
        if n < self.shown_per_kind:
            return True
        if n == self.shown_per_kind:
            note = f"the {_NAMES[kinds[0]][1]} after this one are counted, and shown at 10, 100, 1000..."
        elif n > self.shown_per_kind and _tenfold(n):
            note = f"{n} {_NAMES[kinds[0]][1]} so far"
        else:
            return False
        record.msg, record.args = f"{record.getMessage()} ({note})", None
        return True

    def progress_text(self) -> str:
        """E.g. "3 LLM timeouts, 5 retries, 2 slow calls"; "" when there has been none."""
        with self._lock:
            counts = dict(self.counts)
        return ", ".join(f"{n} {_NAMES[k][n != 1]}" for k in KINDS if (n := counts.get(k, 0)))

    def final_line(self) -> str | None:
        """The run's closing count; None when there has been nothing to count."""
        text = self.progress_text()
        return None if not text else (f"LLM requests of this run: {text} (slow: answered in over {SLOW_CALL_S:g} s; "
                                      "each kind's first lines are above)")


@contextlib.contextmanager
def watch_llm_trouble(logger: logging.Logger | None = None) -> Iterator[LLMTroubleLog]:
    """An `LLMTroubleLog` on `ChatClient`'s logger while the block runs; its final count is logged as it ends."""
    target = logger or logging.getLogger(LOGGER)
    trouble = LLMTroubleLog()
    target.addFilter(trouble)
    try:
        yield trouble
    finally:
        target.removeFilter(trouble)
        if (line := trouble.final_line()) is not None:
            logging.getLogger(__name__).warning("%s", line)
