"""The `rollout` command: its help, dispatch to each module, output that reads whole through a pipe,
and no files left in the working directory unless asked for.

`rollout run` itself, from an empty folder and piped, is checked by the Ctrl-C scenario in
tests/harness/test_faults.py, which runs it twice anyway.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import rollout.cli
from rollout.paths import CONF_DIR, PROJECT_ROOT
from rollout.records import Question, TaskResult
from rollout.report.printed import print_summary
from rollout.report.scoring import summarize
from rollout.run_folder import STATS_DIR
from tests.report.runs import GATEWAY_CALLS, TASKS, make_run

NARROW = "40"
"""$COLUMNS for piped output: narrower than any table here, so only printing tables whole passes."""


def rollout_command_line(*args: str | Path) -> list[str]:
    """`rollout ARGS` through `python -m rollout.cli` (the console script calls the same function)."""
    return [sys.executable, "-m", "rollout.cli", *map(str, args)]


def rollout_command_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with this worktree's package first on the path and narrow piped output."""
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": NARROW, **(env or {})}


def rollout_command(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`rollout ARGS` as a subprocess with stdout piped."""
    return subprocess.run(rollout_command_line(*args), check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=rollout_command_env(env))


def exit_code(argv: list[str]) -> int:
    try:
        return rollout.cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_help_lists_every_command_with_its_python_m_form(capsys):
    assert exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    for name, command in rollout.cli.SUBCOMMANDS.items():
        assert name in out and f"python -m {command.module}" in out
    assert "key=value" in out and "--kebab-case" in out


@pytest.mark.parametrize("name", ["gateway", "report", "view"])
def test_each_path_command_has_its_own_help_under_its_rollout_name(name, capsys):
    assert exit_code([name, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: rollout {name} ")


@pytest.mark.parametrize(("name", "group", "option"), [("run", "mode", "dense"), ("eval-retrieval", "retriever", "default")])
def test_hydra_commands_pass_help_to_hydra(name, group, option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert exit_code([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert "== Configuration groups ==" in out
    assert re.search(rf"^{group}: (.*, )?{option}(,|$)", out, re.MULTILINE), out
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_or_missing_command_is_a_usage_error_naming_the_commands(capsys):
    assert exit_code(["evaluate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'evaluate'" in err and "eval-retrieval" in err and "report" in err
    assert exit_code([]) == 2


def test_the_console_script_names_an_importable_callable():
    scripts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["rollout"].partition(":")
    assert getattr(importlib.import_module(module), attr) is rollout.cli.run  # main, then the quick exit


@pytest.mark.skipif(shutil.which("rollout") is None, reason="the rollout console script is not installed (pip install -e .)")
def test_the_installed_console_script_lists_the_commands():
    r = subprocess.run(["rollout", "--help"], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and all(name in r.stdout for name in rollout.cli.SUBCOMMANDS)


def test_report_and_view_dispatch_to_their_modules(tmp_path, capsys):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    assert rollout.cli.main(["report", "tool-stats", str(run)]) == 0
    assert (run / STATS_DIR / "report.json").is_file() and "per worker" in capsys.readouterr().out
    assert rollout.cli.main(["view", str(run), "--task", "t2"]) == 0
    assert "task t2" in capsys.readouterr().out
    assert rollout.cli.main(["view", str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_the_run_summary_prints_whole_to_a_pipe(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "20")
    records = [
        TaskResult.answered(Question(f"q{i}", "Who?", ["Ada"]), prediction="Ada", worker_id="w", latency_s=0.1,
                            usage={}, calls=[], turns=1, messages=[], events=[])
        for i in range(2)
    ]
    summary = summarize(records, mode="hybrid", gateway_file="g.json", wall_time_s=1.0)
    print_summary(summary, Path("out"))
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "EM" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "EM", "F1", "contains", "recall", "errors", "timeouts", "infra", "truncated", "out of ctx", "time (s)"]
    assert "tool calls" in out


def test_retrieval_evaluation_writes_only_into_its_output_folder_and_pipes_its_table_whole(cache_dir, tmp_path):
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    r = rollout_command("eval-retrieval", "retriever=sparse", "dataset.n_passages=300", "dataset.n_questions=30",
                        f"cache_dir={cache_dir}", f"output_dir={out}", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["retrieval_eval.csv", "retrieval_eval.json", "retrieval_eval.log"]
    header = next(line for line in r.stdout.splitlines() if "retriever" in line and "MRR" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "retriever", "recall@1", "recall@5", "recall@10", "recall@20", "hit@1", "hit@5", "hit@10", "hit@20", "MRR", "q/s"]


def test_retrieval_evaluation_defaults_to_a_folder_under_results():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("retrieval_eval", overrides=["dataset=nq"], return_hydra_config=True)
    assert cfg.output_dir == "results/retrieval_eval/nq" and cfg.hydra.run.dir == cfg.output_dir


def serve_until_ready(args: list[str], cwd: Path, ready: Path) -> subprocess.Popen[str]:
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-m", "rollout.cli", "gateway", *args, "--port", "0", "--ready-file",
                             str(ready)], cwd=cwd, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": pythonpath})
    deadline = time.monotonic() + 300  # a limit on waiting, not a claim about speed
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "the gateway did not start"
    return proc


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_the_gateway_records_stats_only_when_given_an_output_folder(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    common = ["--config", str(CONF_DIR / "gateways" / "rag_no_tool.json"), "--cache-dir", str(tmp_path / "cache"),
              "--demo-passages", "100", "--demo-questions", "20"]
    code, err = stop(serve_until_ready(common, cwd, tmp_path / "ready-1"))
    assert code == 0 and list(cwd.iterdir()) == []
    assert "stats are not recorded: pass --output-dir DIR" in err
    # Given a folder, the ledger is kept there and its report written when the gateway stops, as before.
    out = tmp_path / "gateway"
    code, _ = stop(serve_until_ready([*common, "--output-dir", str(out)], cwd, tmp_path / "ready-2"))
    assert code == 0 and list(cwd.iterdir()) == []
    assert json.loads((out / STATS_DIR / "report.json").read_text())["summary"]["total_calls"] == 0
    # A run's gateway (--no-report) keeps the ledger and leaves the report to the run.
    quiet = tmp_path / "run-gateway"
    code, _ = stop(serve_until_ready([*common, "--output-dir", str(quiet), "--no-report"], cwd, tmp_path / "ready-3"))
    assert code == 0 and (quiet / STATS_DIR).is_dir() and not (quiet / STATS_DIR / "report.json").exists()
