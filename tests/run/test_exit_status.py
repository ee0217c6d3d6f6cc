"""A run that produced nothing says so: it writes its folder, then exits 1 with one line; a sweep goes on past it.

The sweep scenario is also the command line's sweep: one folder per job, each mode's tools, one Ray for all jobs,
one gateway for the jobs of each gateway file, each job's calls in its own ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.errors import ConfigError, RunInterrupted
from rollout.paths import PROJECT_ROOT
from rollout.records import Question, TaskResult
from rollout.report.compare.tables import COMPARISON_MD
from rollout.report.scoring import summarize
from rollout.run.outcome import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_OK,
    EXIT_OK,
    JobEnd,
    RunOutcome,
    job_end,
    sweep_end,
)
from rollout.run_folder import STATS_DIR
from rollout.wire import TOKEN_ENV
from tests.agents.chat_server import answer, chat_server, error, tool_calls
from tests.test_cli import files_containing


def outcome(tmp_path: Path, **ran: int) -> RunOutcome:
    failed = TaskResult.failed(Question("q0", "Who?", ["Ada"]), status="error", error="boom")
    return RunOutcome(tmp_path / "run", summarize([failed], mode="sparse", gateway_file="g.json", wall_time_s=1.0), ran)


def test_a_run_whose_every_task_failed_names_the_statuses_counted_and_its_trajectory(tmp_path):
    line = outcome(tmp_path, infra_error=6, timeout=1, error=2).failure
    assert line == ("no task ended ok: 2 error (the task failed: each record's error says why), "
                    "1 timeout (over task_timeout_s), 6 infra_error (the tools' infrastructure failed), "
                    f"see {tmp_path / 'run' / 'trajectory.jsonl'}")
    assert outcome(tmp_path, infra_error=6).produced_nothing


def test_one_ok_task_or_nothing_to_run_is_a_success(tmp_path):
    assert outcome(tmp_path, ok=1, error=5).failure is None
    assert outcome(tmp_path).failure is None  # every task finished ok earlier: resumed with nothing to do


def test_each_way_a_job_ends_has_its_exit_code_and_line(tmp_path):
    def raises(e: Exception):
        def run() -> RunOutcome:
            raise e
        return run

    assert job_end(lambda: outcome(tmp_path, ok=2)) == JobEnd(EXIT_OK, None, str(tmp_path / "run"))
    nothing = job_end(lambda: outcome(tmp_path, timeout=2))
    assert nothing.code == EXIT_NOTHING_OK == 1 and nothing.line.startswith("no task ended ok: 2 timeout")
    refused = JobEnd(EXIT_BAD_INPUT, "error: bad gateway file", "f")
    assert job_end(raises(ConfigError("bad gateway file")), "f") == refused
    assert job_end(raises(RunInterrupted("interrupted")), "f") == JobEnd(EXIT_INTERRUPTED, "stopped: interrupted", "f")


def test_a_single_job_ends_the_command_as_it_ended_and_a_sweep_names_its_failed_jobs():
    ok, nothing = JobEnd(EXIT_OK, None, "results/demo/dense"), JobEnd(EXIT_NOTHING_OK, "no task ended ok: ...", "b")
    refused = JobEnd(EXIT_BAD_INPUT, "error: ...", "c")
    assert sweep_end([nothing]) is nothing and sweep_end([]) == JobEnd(EXIT_OK)
    assert sweep_end([ok, ok]) == JobEnd(EXIT_OK)
    mixed = sweep_end([ok, nothing, refused])
    assert mixed.code == EXIT_NOTHING_OK
    assert mixed.line.startswith("2 of 3 jobs of the sweep failed") and mixed.line.endswith(
        "b (no task ended ok); c (bad input)")
    assert sweep_end([refused, refused]).code == EXIT_BAD_INPUT  # nothing started at all
    assert sweep_end([nothing, JobEnd(EXIT_INTERRUPTED, "stopped: ...", "d")]).code == EXIT_INTERRUPTED


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def python_m_rollout(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m rollout ARGS` with this worktree's package first on the path."""
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "rollout", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})})


@pytest.mark.slow
def test_a_sweep_gives_one_folder_per_job_runs_past_the_jobs_that_produced_nothing_and_exits_1_naming_them(
        cache_dir, tmp_path):
    # One sweep over two axes, run as a user types it from an empty directory: the default results/ folder lands
    # there, the mode presets' gateway files still resolve against the project, each job gets a folder named by the
    # overrides the sweep varies, the jobs share one Ray, the jobs of a mode share its gateway, and the gateway token (from the
    # environment) is on no file the sweep writes.
    token = "tok-3f9c1e7a-never-on-disk"
    with chat_server() as llm:
        # Each openai job's preflight and tool-parser probe are answered; its tasks' first two requests call the
        # mode's tool, then every request fails: each of its tasks is an error, after two tool calls between them.
        # The heuristic jobs ask no LLM.
        for mode in ("dense", "sparse"):
            call = tool_calls((f"query_knowledge_base_{mode}", {"query": "Who founded it?"}))
            llm.push(answer("OK"), answer("OK"), call, call, *[error(500, "the model server died") for _ in range(2)])
        r = python_m_rollout(
            "-m", "mode=dense,sparse", "agent=heuristic,openai", "llm.model=test-model", f"llm.base_url={llm.base_url}",
            "llm.max_retries=0", "dataset.n_passages=400", "dataset.n_questions=40", "dataset.limit=2", "workers=1",
            "progress=false", f"cache_dir={cache_dir}", cwd=tmp_path, env={TOKEN_ENV: token})
    sweep = tmp_path / "results" / "demo"
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert r.returncode == 1, r.stderr[-3000:]
    # Named by the keys the sweep varies alone: the settings its jobs share are in their configs, not their names.
    heuristic = {mode: sweep / f"{mode},agent=heuristic" for mode in ("dense", "sparse")}
    openai = {mode: sweep / f"{mode},agent=openai" for mode in ("dense", "sparse")}
    assert sorted([*heuristic.values(), *openai.values()]) == sorted(sweep / j for j in jobs)
    assert (sweep / "multirun.yaml").is_file() and files_containing(tmp_path, token) == []
    assert r.stderr.count("Started Ray") == 1  # the four jobs ran on one Ray
    # Two gateways for the four jobs: each mode's second job used the gateway its first one started...
    assert r.stderr.count("rollout.gateway: Gateway rag-") == 2 and r.stderr.count("Using the sweep's gateway") == 2
    # ...and each job's ledger holds its own tasks' calls alone, each once, as its tool report counts them.
    for folder in [*heuristic.values(), *openai.values()]:
        made = [c["call_id"] for task in read_jsonl(folder / "trajectory.jsonl") for c in task["tool_calls"]]
        ledger = [c["call_id"] for c in read_jsonl(folder / STATS_DIR / "realtime_calls.jsonl")]
        assert made and sorted(ledger) == sorted(made), folder.name
        assert json.loads((folder / STATS_DIR / "report.json").read_text())["summary"]["total_calls"] == len(made)
    # Each heuristic job ran its mode with its mode's tool alone, every task ok.
    for mode, tool in [("dense", "query_knowledge_base_dense"), ("sparse", "query_knowledge_base_sparse")]:
        summary = json.loads((heuristic[mode] / "evaluation_summary.json").read_text())
        assert summary["n"] == 2 and summary["mode"] == mode and summary["statuses"]["ok"] == 2
        report = json.loads((heuristic[mode] / STATS_DIR / "report.json").read_text())
        assert [t["tool_name"] for t in report["tools"]] == [tool]
    assert "Results:" in r.stdout
    # Each failed job wrote everything a run writes, and said why, naming its trajectory.
    for folder in openai.values():
        for name in ("trajectory.jsonl", "evaluation_summary.json", f"{STATS_DIR}/report.json", "config.yaml"):
            assert (folder / name).is_file(), name
        assert json.loads((folder / "evaluation_summary.json").read_text())["statuses"]["error"] == 2
        trajectory = folder.relative_to(tmp_path) / "trajectory.jsonl"
        assert f"no task ended ok: 2 error (the task failed: each record's error says why), see {trajectory}\n" \
            in r.stderr
    # The sweep went on past them, compared all four jobs, and its last line names the failed ones alone.
    md = (sweep / COMPARISON_MD).read_text()  # the jobs labelled by the overrides that differ between them
    assert "Baseline: **dense,agent=heuristic**" in md and "sparse,agent=openai,llm.model=test-model" in md
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("2 of 4 jobs of the sweep failed") and last.endswith(
        f"{openai['dense'].relative_to(tmp_path)} (no task ended ok); {openai['sparse'].relative_to(tmp_path)} "
        "(no task ended ok)")
