"""An override interpolating a key the config does not have (`output_dir=/tmp/x/${mode}`) is one line naming the fix
and exit code 2, in a run and in a sweep; the config's own keys and Hydra's resolvers still interpolate."""

from __future__ import annotations

import pytest

from rollout.errors import ConfigError
from rollout.run.config import compose_run_config
from rollout.run.interpolations import unknown_interpolation
from tests.run.test_exit_status import python_m_rollout


def test_the_mode_preset_has_no_key_of_its_own_and_its_name_is_offered():
    problem = unknown_interpolation(["mode=sparse", "output_dir=/tmp/x/${mode}"])
    assert problem is not None and problem.startswith("${mode} in output_dir=/tmp/x/${mode} names no config key")
    assert "output_dir=/tmp/x/${mode_name}" in problem and "${hydra:runtime.choices.GROUP}" in problem


def test_a_misspelled_key_is_named_with_the_one_it_looks_like():
    assert "did you mean ${experiment}?" in unknown_interpolation(["output_dir=/tmp/${experimant}"])
    assert "the keys are" in unknown_interpolation(["output_dir=/tmp/${zzzz}"])


@pytest.mark.parametrize("args", [
    ["output_dir=/tmp/x/${mode_name}"], ["output_dir=/tmp/${dataset.name}/${hydra:runtime.choices.mode}"],
    ["+tag=a", "output_dir=/tmp/${tag}"], ["output_dir=/tmp/${oc.env:HOME}"], ["mode=sparse", "workers=1"],
])
def test_keys_the_config_has_and_resolvers_pass(args):
    assert unknown_interpolation(args) is None


def test_a_composed_config_says_it_in_one_line():
    with pytest.raises(ConfigError) as e:
        compose_run_config("output_dir=/tmp/${dataset.nam}")
    assert "Interpolation key 'dataset.nam' not found (in output_dir)" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("sweep", [[], ["-m"]])
def test_the_command_exits_2_with_one_line(tmp_path, sweep):
    done = python_m_rollout(*sweep, "mode=sparse", f"output_dir={tmp_path}/x/${{mode}}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "${mode_name}" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x").exists()
