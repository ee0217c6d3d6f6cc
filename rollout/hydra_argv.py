"""Run a `@hydra.main` app on an argument list of our choosing: Hydra reads its command line only from sys.argv."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


@contextmanager
def hydra_argv(args: Sequence[str], prog: str | None = None) -> Iterator[None]:
    """`sys.argv` is `[prog, *args]` inside the block (prog: the name usage lines show), as before after it."""
    saved = sys.argv
    sys.argv = [prog or (saved[0] if saved else "rollout"), *args]
    try:
        yield
    finally:
        sys.argv = saved
