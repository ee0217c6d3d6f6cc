"""Trainers' own packages, each in a virtualenv of its own beside this project's environment.

verl 0.9.1 pins transformers below the version this project installs, and openenv-core 0.3.0 needs fastmcp 3 (and
gradio) beside the `mcp` 2.x this project speaks: installed here they would change the packages every other test
runs on. Each lives in `.venvs/<name>` instead, made with `--system-site-packages`, so it sees this project (and
its dependencies) and shadows only what its own trainer pins. Tests run the trainer's code with that venv's
python, in a subprocess.

    python -m tests.trainers.trainer_venvs verl openenv     # make them (what .ci/run does), once per machine

A test needing a venv that is not there is skipped, naming that command; with ROLLOUT_REQUIRE_TRAINERS=1 (CI) it
fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from rollout.paths import PROJECT_ROOT

VENVS_DIR = PROJECT_ROOT / ".venvs"
PACKAGES: dict[str, list[str]] = {
    # verl's agent loop (verl.experimental.agent_loop) imports cachetools, which verl 0.9.1 does not require
    "verl": ["verl==0.9.1", "cachetools"],
    "openenv": ["openenv-core==0.3.0"],
}
"""Each trainer venv's pip requirements, pinned to the versions the adapters are tested against."""
MAKE = "python -m tests.trainers.trainer_venvs"


def python_of(name: str) -> Path:
    return VENVS_DIR / name / "bin" / "python"


def trainer_python(name: str) -> Path:
    """The python of trainer venv `name`; skips the test (fails under ROLLOUT_REQUIRE_TRAINERS=1) when it is missing."""
    python = python_of(name)
    ready = VENVS_DIR / name / ".ready"
    if python.exists() and ready.exists() and ready.read_text() == " ".join(PACKAGES[name]) + "\n":
        return python
    message = f"{' '.join(PACKAGES[name])} is not installed in {VENVS_DIR / name}: run `{MAKE} {name}`"
    if os.environ.get("ROLLOUT_REQUIRE_TRAINERS") == "1":
        pytest.fail(f"{message} (ROLLOUT_REQUIRE_TRAINERS=1 requires it)")
    pytest.skip(message)


def make(name: str) -> None:
    """Create `.venvs/<name>` and install its packages; a venv made with the same packages is left as it is, one
    made with others gets them installed (its `.ready` file names what it holds)."""
    target = VENVS_DIR / name
    wanted = " ".join(PACKAGES[name]) + "\n"
    ready = target / ".ready"
    if ready.exists() and ready.read_text() == wanted:
        print(f"{target}: ready")
        return
    if not ready.exists():
        venv.create(target, system_site_packages=True, with_pip=True, clear=True)
    subprocess.run([str(python_of(name)), "-m", "pip", "install", "--quiet", *PACKAGES[name]], check=True)
    ready.write_text(wanted)
    print(f"{target}: installed {wanted.strip()}")


if __name__ == "__main__":
    names = sys.argv[1:] or list(PACKAGES)
    if unknown := [n for n in names if n not in PACKAGES]:
        sys.exit(f"unknown trainer venv(s) {', '.join(unknown)}; known: {', '.join(PACKAGES)}")
    for n in names:
        make(n)
