"""The trainer venvs see the packages of the interpreter that makes them, a virtualenv's included (made from one,
verl's venv once saw only the base interpreter's packages, lacked uvicorn, and two verl tests failed).

The test makes its own outer virtualenv and checks only for modules it puts there itself, so it holds whatever the
base interpreter holds: a bare one (nothing but pip) included."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

from rollout.paths import PROJECT_ROOT
from tests.trainers.trainer_venvs import interpreter_sites

MAKE_INNER = "import sys; from pathlib import Path; from tests.trainers.trainer_venvs import create; " \
             "create(Path(sys.argv[1]), with_pip=False)"


def site_packages(target: Path) -> Path:
    return target / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def test_a_venv_made_from_a_virtualenv_sees_that_virtualenvs_packages(tmp_path):
    outer, inner, editable = tmp_path / "outer", tmp_path / "inner", tmp_path / "editable"
    venv.create(outer, system_site_packages=True, with_pip=False)
    (site_packages(outer) / "only_in_outer.py").write_text("")
    editable.mkdir()
    (editable / "editable_in_outer.py").write_text("")
    (site_packages(outer) / "__editable__.probe.pth").write_text(f"{editable}\n")
    subprocess.run([outer / "bin" / "python", "-c", MAKE_INNER, inner], cwd=PROJECT_ROOT, check=True)
    # Run away from the project, whose folder `-c` would put on the path: only the outer venv may supply these.
    probe = "import only_in_outer, editable_in_outer"
    done = subprocess.run([inner / "bin" / "python", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_made_from_the_base_interpreter_a_venv_needs_nothing_beyond_system_site_packages():
    if sys.prefix == sys.base_prefix:
        assert interpreter_sites() == ""
    else:
        assert sys.prefix in interpreter_sites()
