"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) serving the tiny model on loopback.

On a machine without llama-cpp-python (or gguf) the tests that need it are skipped with the line that installs
them; with ROLLOUT_REQUIRE_LLAMA=1 (.ci/run sets it) they fail instead, so a CI that lost the server cannot pass
without having run them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NoReturn

import httpx

from rollout.listen import bind_socket
from tests.llm_server.sources import INSTALL

REQUIRE_ENV = "ROLLOUT_REQUIRE_LLAMA"
"""Set to 1 where the tests against a real server must run (CI): a missing server fails them instead of skipping."""
MODULES = ("llama_cpp", "gguf")
MODEL_ALIAS = "tiny"
"""The model name the server answers to (`llm.model=tiny`)."""
CHAT_FORMAT = "chatml-function-calling"
"""llama-cpp-python's chat handler that takes `tools`: the GGUF's own template (what the server uses without
--chat_format) ignores them. It renders ChatML, which is Qwen2.5's format."""


class LlamaMissing(Exception):
    """No llama-cpp-python server to start; the message says how to get one."""


def require_llama(modules: tuple[str, ...] = MODULES) -> None:
    """Raise LlamaMissing when one of `modules` (llama-cpp-python's and gguf's) is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise LlamaMissing(f"{' and '.join(missing)} not installed: {INSTALL}")


def no_llama(problem: LlamaMissing, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Skip the calling test for want of the server, or fail it where the environment requires these tests."""
    import pytest

    if environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{problem} ({REQUIRE_ENV}=1: the tests against a real server must run)", pytrace=False)
    pytest.skip(str(problem))


def server_command(model: Path, n_ctx: int, port: int, chat_format: str = CHAT_FORMAT, *, alias: str = MODEL_ALIAS,
                   module: str = "llama_cpp.server") -> list[str]:
    """The command line that serves `model` under `alias` with an `n_ctx`-token window on 127.0.0.1:`port`, on one
    thread. `module`: llama-cpp-python's server, or `tests.llm_server.serve` (the same server with llama.cpp's extra
    weight layouts off, which a quantized model needs on some AMX machines)."""
    return [sys.executable, "-m", module, "--model", str(model), "--model_alias", alias,
            "--n_ctx", str(n_ctx), "--chat_format", chat_format, "--n_threads", "1", "--n_threads_batch", "1",
            "--host", "127.0.0.1", "--port", str(port)]


@contextlib.contextmanager
def llama_server(model: Path, n_ctx: int, log_path: Path, chat_format: str = CHAT_FORMAT) -> Iterator[str]:
    """Serve `model` while inside; yield its API root (`http://127.0.0.1:PORT/v1`) once `/v1/models` answers. Its
    output goes to `log_path`; it is stopped on leaving."""
    with served(lambda port: server_command(model, n_ctx, port, chat_format), log_path) as base_url:
        yield base_url


PORT_TRIES = 3
"""Ports tried: the free port found is released for the server to bind, and another process may take it first."""


@contextlib.contextmanager
def served(command: Callable[[int], list[str]], log_path: Path) -> Iterator[str]:
    """Run `command(port)`, a server on 127.0.0.1:port, while inside; yield its API root once `/v1/models` answers.
    Its output goes to `log_path`; it is stopped on leaving. A port taken before the server bound it is replaced."""
    for attempt in range(1, PORT_TRIES + 1):
        with bind_socket("127.0.0.1", 0) as sock:  # a free port, released for the server to bind
            port = sock.getsockname()[1]
        base_url = f"http://127.0.0.1:{port}/v1"
        argv = command(port)
        with log_path.open("w", encoding="utf-8") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120  # a limit on waiting, not a claim about speed
            while not _answers(f"{base_url}/models"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = log_path.read_text(encoding="utf-8")
                    if proc.poll() is not None and "address already in use" in said.lower() and attempt < PORT_TRIES:
                        break
                    raise RuntimeError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} did not start "
                                       f"(exit {proc.poll()}): {said[-2000:]}")
                time.sleep(0.2)
            else:
                yield base_url
                return
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
