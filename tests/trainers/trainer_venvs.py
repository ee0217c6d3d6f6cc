"""Trainers' own packages, each in a virtualenv of its own beside this project's environment.

verl 0.9.1 pins transformers below the version this project installs, and openenv-core 0.3.0 brings gradio, which
pins pillow below the 13 this project's environment has (its `fastmcp>=3` is no clash: Pyserini, the lucene extra,
puts fastmcp 4 here, which satisfies it): installed here they would change the packages every other test runs on.
Each lives in `.venvs/<name>` instead, made with `--system-site-packages` and a `.pth` file that adds the site
directories of the interpreter that made it, so it sees this project (and its dependencies) also when that
interpreter is itself a virtualenv's (whose packages `--system-site-packages` alone would not show), and shadows only
what its own trainer pins. Tests run the trainer's code with that venv's python, in a subprocess.

    python -m tests.trainers.trainer_venvs verl openenv     # make them (what .ci/run does), once per environment

A test needing a venv that is not there, or that was made from another interpreter, is skipped, naming that command;
with ROLLOUT_REQUIRE_TRAINERS=1 (CI) it fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from rollout.paths import PROJECT_ROOT

VENVS_DIR = PROJECT_ROOT / ".venvs"
PACKAGES: dict[str, list[str]] = {
    # verl's agent loop (verl.experimental.agent_loop) imports cachetools, which verl 0.9.1 does not require
    "verl": ["verl==0.9.1", "cachetools"],
    "openenv": ["openenv-core==0.3.0"],
}
"""Each trainer venv's pip requirements, pinned to the versions the adapters are tested against."""
MAKE = "python -m tests.trainers.trainer_venvs"
SEES = "rollout-interpreter.pth"
"""The file in a venv's site-packages that adds the site directories of the interpreter that made it."""


def python_of(name: str) -> Path:
    return VENVS_DIR / name / "bin" / "python"


def _site_packages(target: Path) -> Path:
    return target / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def interpreter_sites() -> str:
    """The `.pth` text that adds the running interpreter's site directories (purelib, platlib) that are not its base
    interpreter's (a virtualenv's; none for the base itself) to a venv's path, their own `.pth` files (editable
    installs) read as the interpreter reads them."""
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    paths = sysconfig.get_paths()
    sites = [site for site in dict.fromkeys([paths["purelib"], paths["platlib"]])
             if site not in (base["purelib"], base["platlib"])]
    return "".join(f"import site; site.addsitedir({site!r})\n" for site in sites)


def create(target: Path, *, with_pip: bool = True) -> None:
    """A fresh venv at `target` that sees the packages of the running interpreter: those of its base interpreter
    (`--system-site-packages`) and, when it runs in a virtualenv, that virtualenv's, which come first."""
    venv.create(target, system_site_packages=True, with_pip=with_pip, clear=True)
    (_site_packages(target) / SEES).write_text(interpreter_sites())


def trainer_python(name: str) -> Path:
    """The python of trainer venv `name`; skips the test (fails under ROLLOUT_REQUIRE_TRAINERS=1) when it is missing
    or was made from another interpreter."""
    # Imported here: `create` also runs under interpreters without pytest (a bare one's venv, in the venv tests).
    import pytest

    python = python_of(name)
    ready, sees = VENVS_DIR / name / ".ready", _site_packages(VENVS_DIR / name) / SEES
    if not (python.exists() and ready.exists() and ready.read_text() == " ".join(PACKAGES[name]) + "\n"):
        message = f"{' '.join(PACKAGES[name])} is not installed in {VENVS_DIR / name}: run `{MAKE} {name}`"
    elif not sees.exists() or sees.read_text() != interpreter_sites():
        message = (f"{VENVS_DIR / name} was made from another interpreter than {sys.executable}, whose packages it "
                   f"does not see: run `{MAKE} {name}` with it")
    else:
        return python
    if os.environ.get("ROLLOUT_REQUIRE_TRAINERS") == "1":
        pytest.fail(f"{message} (ROLLOUT_REQUIRE_TRAINERS=1 requires it)")
    pytest.skip(message)


def make(name: str) -> None:
    """Create `.venvs/<name>` and install its packages; a venv made with the same packages is left as it is (but for
    seeing the running interpreter's packages), one made with others gets them installed (its `.ready` file names
    what it holds)."""
    target = VENVS_DIR / name
    wanted = " ".join(PACKAGES[name]) + "\n"
    ready = target / ".ready"
    if ready.exists():
        (_site_packages(target) / SEES).write_text(interpreter_sites())
        if ready.read_text() == wanted:
            print(f"{target}: ready")
            return
    else:
        create(target)
    subprocess.run([str(python_of(name)), "-m", "pip", "install", "--quiet", *PACKAGES[name]], check=True)
    ready.write_text(wanted)
    print(f"{target}: installed {wanted.strip()}")


if __name__ == "__main__":
    names = sys.argv[1:] or list(PACKAGES)
    if unknown := [n for n in names if n not in PACKAGES]:
        sys.exit(f"unknown trainer venv(s) {', '.join(unknown)}; known: {', '.join(PACKAGES)}")
    for n in names:
        make(n)
