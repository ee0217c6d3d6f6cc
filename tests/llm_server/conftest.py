"""The tiny model and the llama-cpp-python servers serving it, each made once per session.

A server per context window (`llama_servers.get(n_ctx)`), started when first asked for and stopped at the session's
end, each behind a `WireLog` proxy so tests read what rollout sent and what the server answered. Skipped (failed
under ROLLOUT_REQUIRE_LLAMA=1) where llama-cpp-python is not installed: see tests/llm_server/server.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import shared_by_workers
from tests.llm_server.server import LlamaMissing, llama_server, no_llama, require_llama
from tests.llm_server.tiny_model import tiny_model
from tests.llm_server.wire_log import WireLog, wire_log


@dataclass(frozen=True, slots=True)
class Served:
    """One running server: its own API root, the proxy's (what runs use), and the proxy's log."""

    direct: str
    url: str
    wire: WireLog


class LlamaServers:
    """The session's servers of the tiny model, one per context window."""

    def __init__(self, model: Path, logs: Path, stack: contextlib.ExitStack) -> None:
        self.model = model
        self._logs = logs
        self._stack = stack
        self._served: dict[int, Served] = {}

    def get(self, n_ctx: int) -> Served:
        if n_ctx not in self._served:
            direct = self._stack.enter_context(llama_server(self.model, n_ctx, self._logs / f"llama-{n_ctx}.log"))
            url, wire = self._stack.enter_context(wire_log(direct))
            self._served[n_ctx] = Served(direct, url, wire)
        return self._served[n_ctx]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, built once for all the session's workers."""
    try:
        require_llama()
    except LlamaMissing as e:
        no_llama(e)
    return tiny_model(shared_by_workers(tmp_path_factory) / "tiny-model")


@pytest.fixture(scope="session")
def llama_servers(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServers]:
    with contextlib.ExitStack() as stack:
        yield LlamaServers(tiny_gguf, tmp_path_factory.mktemp("llama-logs"), stack)
