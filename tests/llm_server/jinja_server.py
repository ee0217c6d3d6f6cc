"""llama.cpp's own OpenAI-compatible server, `llama-server`, built from the sources that llama-cpp-python's source
distribution vendors (`vendor/llama.cpp`), so it is the same llama.cpp as the installed llama-cpp-python.

Started with `--jinja` it renders a chat template that knows tools (the model's own, or one given with
`--chat-template-file`) and parses the model's tool calls: the tools are described in the prompt and each tool
message is rendered with what the tool returned, so the model reads it. llama-cpp-python's `--chat_format
chatml-function-calling` renders a tool message empty (docs/agents.md, "Smoke-testing with a real server"). A template
that knows no tools (SmolLM2's own) gets no tools at all: this llama.cpp leaves them out of its prompt.

`llama_server_binary()` builds it once (cmake and a C++ compiler; 9 to 12 minutes of CPU time) into the rollout cache
(`$ROLLOUT_CACHE_DIR`, else ~/.cache/rollout), in a folder named by the version; later sessions build nothing:

    python -m tests.llm_server.jinja_server        # builds it the first time, prints its path
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from rollout.paths import default_cache_dir
from tests.demo_runs import locked
from tests.llm_server.server import LlamaMissing
from tests.llm_server.sources import download_sdist, llama_cpp_version

VENDORED = "vendor/llama.cpp/"
CMAKE_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_SERVER=ON",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF")
"""One static binary with nothing it would fetch: no curl (models come as files), no TLS (loopback only)."""
BUILD_TOOLS = "building llama-server needs cmake and a C++ compiler (pip install cmake; apt-get install g++)"


BUILD = "python -m tests.llm_server.jinja_server"
"""What builds it (.ci/run does, before the tests)."""


def llama_server_binary(cache: Path | None = None, version: str | None = None, *, build: bool = True) -> Path:
    """The `llama-server` of llama-cpp-python `version` (default: the installed one), built once into `cache`.
    Processes asking at once build it once (a lock on the folder). With `build=False` one not built yet is
    `LlamaMissing` naming the command that builds it: a test session does not spend minutes compiling."""
    version = version or llama_cpp_version()
    folder = (cache or default_cache_dir()) / f"llama-server-{version}"
    binary = folder / "llama-server"
    if not build and not binary.is_file():
        raise LlamaMissing(f"llama.cpp's llama-server is not built: {BUILD} (9 to 12 minutes of CPU time, once)")
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        if not binary.is_file():
            _build(version, binary)
    return binary


def _build(version: str, binary: Path) -> None:
    cmake = shutil.which("cmake")
    if cmake is None or not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        raise LlamaMissing(BUILD_TOOLS)
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        work = Path(tmp)
        source = _vendored_sources(download_sdist(version, work), work / "src")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        steps = ([cmake, "-S", str(source), "-B", str(work / "build"), *generator, *CMAKE_OPTIONS],
                 [cmake, "--build", str(work / "build"), "--target", "llama-server", "-j", str(os.cpu_count() or 1)])
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"building llama-server failed ({' '.join(step)}): "
                                   f"{(done.stdout + done.stderr).strip()[-2000:]}")
        aside = binary.with_name(f".{binary.name}.{os.getpid()}")
        shutil.copy2(work / "build" / "bin" / "llama-server", aside)
        os.replace(aside, binary)


def _vendored_sources(archive: Path, target: Path) -> Path:
    """Unpack the archive's `vendor/llama.cpp` into `target`; return the llama.cpp source root."""
    with tarfile.open(archive) as tar:
        root = tar.getnames()[0].split("/")[0]
        prefix = f"{root}/{VENDORED}"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for member in members:
            member.name = member.name[len(f"{root}/"):]
        tar.extractall(target, members=members, filter="data")
    return target / VENDORED


def server_command(binary: Path, model: Path, alias: str, n_ctx: int, port: int,
                   template: Path | None = None) -> list[str]:
    """`llama-server` serving `model` under `alias` with an `n_ctx`-token window on 127.0.0.1:`port`, with tool calls
    (`--jinja`) in the model's own template, or in `template` (`--chat-template-file`); one slot, one thread.
    `--no-repack` keeps llama.cpp's CPU backend off its repacked and AMX weight layouts, on which a Q4_1 model dies on
    some AMX machines (tests/llm_server/serve.py)."""
    chosen = ["--chat-template-file", str(template)] if template is not None else []
    return [str(binary), "--model", str(model), "--alias", alias, "--ctx-size", str(n_ctx), "--jinja", *chosen,
            "--no-repack", "--parallel", "1", "--threads", "1", "--threads-batch", "1", "--host", "127.0.0.1",
            "--port", str(port)]

if __name__ == "__main__":
    print(llama_server_binary())
