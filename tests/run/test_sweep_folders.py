"""A sweep's job folders are named by the keys the sweep varies: short, safe, and the same when it is run again.

Every other override stays in the job's config and identity; a single run still names its folder by all of them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from rollout.errors import ConfigError
from rollout.paths import CONF_DIR, PROJECT_ROOT
from rollout.run.config import compose_run_config
from rollout.run.identity import RunIdentity
from rollout.run.resume import finished_tasks
from rollout.run.sweep_folders import sweeping, swept_keys

ENDPOINT = ("agent=openai", "llm.base_url=http://127.0.0.1:8000/v1", "llm.model=Qwen/Qwen2.5-7B-Instruct")


def job_of_a_sweep(command: list[str], *job: str):
    """The config of one job of `python -m rollout -m COMMAND`, as Hydra composes it (`hydra.mode=MULTIRUN`)."""
    with sweeping(swept_keys(command)):
        return compose_run_config(*job, "hydra.mode=MULTIRUN")


@contextlib.contextmanager
def in_a_sweeps_job(*overrides: str) -> Iterator[None]:
    """Hydra's config of a running sweep job, as the driver sees it."""
    hydra_config = HydraConfig.instance()
    earlier = hydra_config.cfg
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        hydra_config.set_config(compose("config", overrides=[*overrides, "hydra.mode=MULTIRUN"],
                                        return_hydra_config=True))
    try:
        yield
    finally:
        hydra_config.cfg = earlier


@pytest.mark.parametrize(("args", "keys"), [
    (["mode=dense,sparse", *ENDPOINT], {"mode"}),
    (["mode=sparse", "+agent.top_k=1,5", "seed=range(0,3)", "dataset.n_passages=400"], {"agent.top_k", "seed"}),
    (["agent.top_k=choice(3)", "mode=glob(*)", "-v", "system_prompt='a, b'", "agent.top_k=[1,2]"], {"mode"}),
    (["mode=dense,"], set()),  # Hydra refuses it itself
])
def test_the_swept_keys_are_those_given_several_values(args, keys):
    assert swept_keys(args) == keys


def test_a_sweeps_folders_name_the_keys_it_varies_and_its_jobs_keep_every_override():
    command = ["mode=dense,sparse", *ENDPOINT, "agent.max_turns=2,4", "dataset.n_passages=400"]
    job = job_of_a_sweep(command, "mode=dense", *ENDPOINT, "agent.max_turns=2", "dataset.n_passages=400")
    assert job.output_dir == Path("results/demo/dense,agent.max_turns=2")
    assert job.overrides == ("agent=openai", "llm.base_url=http_127.0.0.1_8000_v1",
                             "llm.model=Qwen_Qwen2.5-7B-Instruct", "agent.max_turns=2", "dataset.n_passages=400")
    assert job.llm["model"] == "Qwen/Qwen2.5-7B-Instruct" and job.dataset.n_passages == 400
    # A sweep over modes with shared settings: short folders, one per mode; run again, the same ones.
    issue = ["mode=dense,sparse", *ENDPOINT]
    folders = [job_of_a_sweep(issue, f"mode={m}", *ENDPOINT).output_dir for m in ("dense", "sparse")]
    assert folders == [Path("results/demo/dense"), Path("results/demo/sparse")]
    assert [job_of_a_sweep(issue, f"mode={m}", *ENDPOINT).output_dir for m in ("dense", "sparse")] == folders


def test_documented_folders_stay_as_they_were():
    assert job_of_a_sweep(["mode=dense,sparse,hybrid,no_tool"], "mode=dense").output_dir == Path("results/demo/dense")
    assert [job_of_a_sweep(["agent.top_k=1,5"], f"agent.top_k={k}").output_dir for k in (1, 5)] == [
        Path("results/demo/hybrid,agent.top_k=1"), Path("results/demo/hybrid,agent.top_k=5")]
    # A single run names its folder by each identity override, in a sweep's context or not.
    single = ("mode=sparse", "agent.top_k=1", "dataset.n_passages=400")
    expected = Path("results/demo/sparse,agent.top_k=1,dataset.n_passages=400")
    assert compose_run_config(*single).output_dir == expected
    with sweeping(swept_keys(single)):
        assert compose_run_config(*single).output_dir == expected


def test_a_sweeps_job_in_a_folder_of_another_experiment_is_told_how_to_file_the_sweep_elsewhere(tmp_path):
    (tmp_path / "trajectory.jsonl").write_text('{"id": "a", "status": "ok"}\n')
    earlier = RunIdentity(settings={"llm.model": "model-a"}, gateway_file_sha256="g", tools={}, dataset={})
    finished_tasks(tmp_path, earlier)
    later = RunIdentity(settings={"llm.model": "model-b"}, gateway_file_sha256="g", tools={}, dataset={})
    with in_a_sweeps_job("mode=dense"), pytest.raises(ConfigError) as refused:
        finished_tasks(tmp_path, later)
    assert 'llm.model: "model-a" → "model-b"' in str(refused.value) and "dataset.name=NAME" in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # a single run
        finished_tasks(tmp_path, later)
    assert "output_dir=" in str(refused.value) and "dataset.name" not in str(refused.value)


def test_the_command_lines_sweep_names_its_job_folders_by_the_keys_it_varies(tmp_path):
    # Every job is refused before it starts (workers=0), and the sweep's last line names each job's folder.
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-m", "rollout", "-m", "mode=dense,sparse", "agent.top_k=1,5",
                        "dataset.n_passages=400", "workers=0", "progress=false"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": pythonpath})
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("4 of 4 jobs of the sweep failed") and last.endswith(
        "results/demo/dense,agent.top_k=1 (bad input); results/demo/dense,agent.top_k=5 (bad input); "
        "results/demo/sparse,agent.top_k=1 (bad input); results/demo/sparse,agent.top_k=5 (bad input)"), last
