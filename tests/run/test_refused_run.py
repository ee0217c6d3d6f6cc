"""A run refused before it starts (exit 2) leaves no folder behind, and never removes a folder an earlier run wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.errors import ConfigError
from rollout.paths import PROJECT_ROOT
from rollout.run.config import compose_run_config
from rollout.run.driver import run


def refused(out: Path) -> None:
    with pytest.raises(ConfigError, match="gateway file not found"):
        run(compose_run_config(f"output_dir={out}", "gateway_config_path=/nonexistent.json"))


def test_a_refused_run_removes_the_folder_it_created_and_the_parents_left_empty_below_the_working_directory(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "demo" / "dense").mkdir(parents=True)  # an earlier run's
    refused(Path("results/demo/hybrid"))
    refused(Path("results/other/hybrid"))
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["demo"]
    assert sorted(p.name for p in (tmp_path / "results" / "demo").iterdir()) == ["dense"]


def test_a_refused_run_into_the_working_directory_leaves_it(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    refused(Path("."))
    assert work.is_dir()


def test_a_refused_run_leaves_an_earlier_runs_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "trajectory.jsonl").write_text('{"id": "q1"}\n')
    refused(out)
    assert (out / "trajectory.jsonl").read_text() == '{"id": "q1"}\n'


def rollout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run([sys.executable, "-m", "rollout", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env, check=False)


def test_refused_commands_leave_no_results_folder_with_a_lock_and_a_log(tmp_path):
    (tmp_path / "qa.jsonl").write_text('{"id": "q1", "question": "Who?", "golden_answers": ["x"]}\n')
    bad_gateway = rollout("gateway_config_path=/nonexistent.json", "dataset.n_passages=300", cwd=tmp_path)
    no_corpus = rollout("dataset=files", f"dataset.questions.path={tmp_path / 'qa.jsonl'}", cwd=tmp_path)
    assert bad_gateway.returncode == no_corpus.returncode == 2, bad_gateway.stderr + no_corpus.stderr
    assert "gateway file not found" in bad_gateway.stderr and "dataset.corpus.path" in no_corpus.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qa.jsonl"]


@pytest.mark.parametrize("removed", ["~resume", "~llm", "~gateway.replicas"])
def test_a_config_without_a_key_it_reads_is_one_line_naming_the_key(removed):
    with pytest.raises(ConfigError) as e:
        compose_run_config(removed)
    said = str(e.value)
    assert said.startswith(f"the config has no key {removed[1:]!r}") and "\n" not in said
