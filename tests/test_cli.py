"""The command line as a user runs it: bad input gives one clear line and exit code 2.

Input refused before Hydra starts a job (an unknown mode, a token on the command line, the gateway's own
arguments) is checked in this process through the console script's function, `rollout.cli.main`, as the
`rollout` tests do; what a run refuses once started goes through `python -m rollout` in a subprocess. A sweep
from an empty folder (one folder per mode) runs in tests/run/test_exit_status.py's sweep scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.paths import PROJECT_ROOT
from rollout.run.lock import hold_run_lock
from rollout.wire import TOKEN_ENV
from tests.test_rollout_command import exit_code


def rollout(*args: str, cwd: Path = PROJECT_ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, **(env or {})},
    )


def files_containing(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_missing_gateway_file(tmp_path):
    r = rollout(f"gateway_config_path={tmp_path / 'nope.json'}", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2
    assert "gateway file not found" in r.stderr and "nope.json" in r.stderr and "rag_hybrid.json" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out" / "trajectory.jsonl").exists()


def test_unknown_tool_group(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"modules": [{"resource_type": "rag", "tool_groups": ["rag_query", "rag_serch"]}]}))
    r = rollout(f"gateway_config_path={bad}", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2
    assert "'rag_serch'" in r.stderr and "rag_query_sparse" in r.stderr and "Traceback" not in r.stderr
    # The run's gateway refuses the file (the run does not plan it before Ray starts): said once, pointed to once.
    assert r.stderr.count("unknown tool group") == 1 and "its error is printed above" in r.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_mode_lists_modes(tmp_path, capsys):
    assert exit_code(["run", "mode=dense_plus", f"output_dir={tmp_path}"]) != 0
    err = capsys.readouterr().err
    for mode in ("dense", "sparse", "hybrid", "no_tool"):
        assert mode in err


def test_missing_question_file(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "contents": "T\ntext"}) + "\n")
    r = rollout("dataset=files", f"dataset.corpus.path={corpus}", f"dataset.questions.path={tmp_path / 'q.jsonl'}",
                f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2 and "q.jsonl" in r.stderr and "Traceback" not in r.stderr


def test_dataset_paths_are_required(tmp_path):
    r = rollout("dataset=files", f"output_dir={tmp_path / 'out'}")
    assert r.returncode == 2 and "dataset.corpus.path" in r.stderr


def test_gateway_alone_rejects_missing_file(tmp_path, capsys):
    (tmp_path / "mine.json").write_text("{}")
    assert exit_code(["gateway", "--config", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "gateway file not found" in err and "Set --config to one of" in err and "gateway_config_path" not in err
    listed = err.partition("one of: ")[2].strip().split(", ")
    assert len(listed) == len(set(listed)) and str(tmp_path / "mine.json") in listed
    assert "conf/gateways/rag_hybrid.json" in listed


@pytest.mark.parametrize("argv, says", [
    (["gateway", "--help"], "use rollout gateway --help (or python -m rollout.gateway --help)"),
    (["-v", "report", "compare", "a", "b"], "use rollout report compare a b (or python -m rollout.report compare a b)"),
    (["run", "mode=sparse"], "drop `run` (python -m rollout mode=sparse)"),
])
def test_a_subcommand_after_python_m_rollout_names_the_command_to_type(argv, says, tmp_path):
    r = rollout(*argv, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")
    assert says in r.stderr and not (tmp_path / "outputs").exists()


def test_a_token_on_the_command_line_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert exit_code(["run", "-m", "mode=sparse", "gateway.auth_token=s3cret-value"]) == 2
    err = capsys.readouterr().err
    assert TOKEN_ENV in err and "Traceback" not in err
    assert files_containing(tmp_path, "s3cret-value") == [] and not (tmp_path / "results").exists()


def test_a_folder_in_use_is_refused_with_one_line(cache_dir, tmp_path):
    out = tmp_path / "busy"
    with hold_run_lock(out):
        r = rollout("mode=sparse", f"output_dir={out}", f"cache_dir={cache_dir}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert str(out) in line and f"pid {os.getpid()}" in line
    assert not (out / "trajectory.jsonl").exists()


def test_a_gateway_file_that_leaves_the_agent_no_tool_stops_the_run_before_it_starts(tmp_path):
    from rollout.errors import ConfigError
    from rollout.run.config import compose_run_config
    from rollout.run.driver import run

    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"modules": [{"resource_type": "RAG", "tool_groups": ["rag_query_sparse"]}]}))
    cfg = compose_run_config(f"gateway_config_path={typo}", f"output_dir={tmp_path / 'out'}")
    with pytest.raises(ConfigError, match=r"module 1 has resource_type 'RAG' .*did you mean 'rag'\?"):
        run(cfg)
    assert not (tmp_path / "out" / "trajectory.jsonl").exists()


def test_the_report_command_loads_what_a_subcommand_runs_on_only_when_it_runs():
    code = ("import sys, rollout.report.cli; "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'openai') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
