"""The tokenizer and chat template the tiny model is made of: files llama-cpp-python's source distribution ships
for llama.cpp's own tests.

`vendor/llama.cpp/models/ggml-vocab-qwen2.gguf` is Qwen2's tokenizer alone (a GGUF with no tensors) and
`vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja` Qwen2.5's chat template. `llama_sources()` fetches
the source distribution of the installed llama-cpp-python (else `LLAMA_CPP_VERSION`) with pip the first time — `pip
download --no-binary :all:`, which pip's own HTTP cache serves from disk after one download — takes out those two
files and keeps them under the rollout cache (`$ROLLOUT_CACHE_DIR`, else ~/.cache/rollout), in a folder named by
the version. Later sessions find them there and fetch nothing.

    python -m tests.llm_server.sources      # fetches them the first time, prints the template's path
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rollout.paths import default_cache_dir
from tests.demo_runs import locked

LLAMA_CPP_VERSION = "0.3.36"
"""The llama-cpp-python release CI installs (.ci/run); its source distribution when none is installed."""
INSTALL = f'pip install "llama-cpp-python[server]=={LLAMA_CPP_VERSION}" gguf'
"""What the tests against a real server need (the build compiles llama.cpp: minutes on a few cores)."""
VOCAB = "vendor/llama.cpp/models/ggml-vocab-qwen2.gguf"
TEMPLATE = "vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"


@dataclass(frozen=True, slots=True)
class LlamaSources:
    """The two files the tiny model is built from."""

    vocab: Path
    """A vocab-only GGUF: its `tokenizer.ggml.*` keys are the model's tokenizer."""
    template: Path
    """The chat template the model carries as `tokenizer.chat_template`."""


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version, else the one CI installs."""
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return LLAMA_CPP_VERSION


def llama_sources(cache: Path | None = None, version: str | None = None) -> LlamaSources:
    """The vocabulary and template of llama-cpp-python `version`, fetched once into `cache` (default: the rollout
    cache) and kept there. Processes asking at once fetch it once (a lock on the folder)."""
    version = version or llama_cpp_version()
    folder = (cache or default_cache_dir()) / f"llama-cpp-python-{version}"
    sources = LlamaSources(folder / Path(VOCAB).name, folder / Path(TEMPLATE).name)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        if not (sources.vocab.is_file() and sources.template.is_file()):
            _fetch(version, sources)
    return sources


def _fetch(version: str, sources: LlamaSources) -> None:
    """Download the source distribution into a temporary folder and move the two files out of it."""
    with tempfile.TemporaryDirectory(prefix="llama-sdist-") as tmp:
        archive = download_sdist(version, Path(tmp))
        with tarfile.open(archive) as tar:
            root = tar.getnames()[0].split("/")[0]
            for member, target in ((VOCAB, sources.vocab), (TEMPLATE, sources.template)):
                data = tar.extractfile(f"{root}/{member}")
                if data is None:
                    raise RuntimeError(f"{archive.name} has no file {member}")
                aside = target.with_name(f".{target.name}.{os.getpid()}")
                aside.write_bytes(data.read())
                os.replace(aside, target)


def download_sdist(version: str, folder: Path) -> Path:
    """llama-cpp-python `version`'s source distribution, downloaded into `folder` (pip's HTTP cache serves it from
    disk after one download)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={version}", "-d", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    archives = list(folder.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not archives:
        raise RuntimeError(f"could not download llama-cpp-python {version}'s source distribution "
                           f"({' '.join(command[1:])}): {done.stderr.strip()[-1000:]}")
    return archives[0]


if __name__ == "__main__":
    print(llama_sources().template)
