"""`python -m rollout.report tool-stats PATH...`: tables printed (whole, even piped), files rewritten, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.report.runs import DENSE, GATEWAY_CALLS, SPARSE, TASKS, accounted, make_run

PROJECT = Path(__file__).resolve().parents[2]


def cli(*args: str | Path, columns: str = "220") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, "-m", "rollout.report", *map(str, args)],
        check=False, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=120,
    )


def test_tool_stats_prints_tables_and_rewrites_the_report(tmp_path):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    stale = run / "tool_stats" / "report.json"
    stale.write_text('{"summary": {"total_calls": 1}, "tools": [], "tasks": []}')
    result = cli("tool-stats", run)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for title in ("per tool", "per worker", "retrieval", "per mode", "retrieval per mode"):
        assert title in out
    for name in (DENSE, SPARSE, "fetch_document", "w0", "w1", "hybrid"):
        assert name in out
    dense_row = next(line for line in out.splitlines() if DENSE in line and "%" in line and "hit" not in line)
    assert "80.0%" in dense_row and "invalid_arguments=1" in dense_row
    retrieval_mode_row = out.splitlines()[-2]
    assert "hybrid" in retrieval_mode_row
    assert ["40.0%", "60.0%", "80.0%", "100.0%", "33.3%"] == [c for c in retrieval_mode_row.split() if c.endswith("%")]
    report = json.loads(stale.read_text())
    assert report["summary"]["total_calls"] == 9
    for csv in ("tools.csv", "tasks.csv", "workers.csv", "retrieval.csv"):
        assert (run / "tool_stats" / csv).is_file()


def test_several_folders_compare_modes(tmp_path):
    hybrid = make_run(tmp_path, "hybrid", GATEWAY_CALLS, TASKS, mode="hybrid")
    empty = make_run(tmp_path, "none", [], None, mode="no_tool")
    result = cli("tool-stats", hybrid, empty)
    assert result.returncode == 0, result.stderr
    per_mode = result.stdout.split("per mode", 1)[1]
    assert "hybrid" in per_mode and "no_tool" in per_mode
    assert "gateway-only stats" in result.stdout  # the folder without trajectory.jsonl says so


def test_a_folder_without_tool_stats_is_a_one_line_error(tmp_path):
    good = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    bad = tmp_path / "not_a_run"
    bad.mkdir()
    result = cli("tool-stats", good, bad)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "tool_stats" in lines[0]
    assert not (good / "tool_stats" / "report.json").exists()  # nothing written before the check


def test_a_missing_folder_is_a_one_line_error(tmp_path):
    result = cli("tool-stats", tmp_path / "nowhere")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "nowhere" in result.stderr


def test_half_written_line_warns_and_succeeds(tmp_path):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    with (run / "tool_stats" / "realtime_calls.jsonl").open("a") as f:
        f.write('{"call_id": "c10", "tool')
    result = cli("tool-stats", run)
    assert result.returncode == 0, result.stderr
    assert "realtime_calls.jsonl:10" in result.stderr and "warning" in result.stderr
    assert json.loads((run / "tool_stats" / "report.json").read_text())["summary"]["total_calls"] == 9


def test_a_subcommand_is_required():
    result = cli()
    assert result.returncode == 2
    assert "tool-stats" in result.stderr or "COMMAND" in result.stderr


def headers(out: str, first: str) -> list[list[str]]:
    """The header cells of each table printed whose first column is `first`."""
    return [[cell.strip() for cell in line.strip("┃").split("┃")]
            for line in out.splitlines() if line.startswith(f"┃ {first} ")]


def test_piped_tables_are_printed_whole_however_narrow_the_columns(tmp_path):
    run = make_run(tmp_path, "run_a", GATEWAY_CALLS, TASKS, mode="hybrid")
    result = cli("tool-stats", run, columns="40")
    assert result.returncode == 0, result.stderr
    per_tool, retrieval = headers(result.stdout, "tool_name")
    assert per_tool == ["tool_name", "calls", "failed", "success", "p50 ms", "p95 ms", "p99 ms", "rtt p50", "rtt p95",
                        "rtt p99", "ctx tok p50", "ctx tok p95", "ctx tok mean", "failures"]
    assert retrieval[-3:] == ["queries", "repeated", "repeat share"]
    result = cli("compare", run, "--out", tmp_path / "cmp", columns="40")
    assert result.returncode == 0, result.stderr
    assert headers(result.stdout, "mode")[0][-6:] == ["infra", "truncated", "out of turns", "out of ctx", "repeated calls",
                                                      "tokens/task"]
    # Every table it prints is also written for programs.
    assert (tmp_path / "cmp" / "comparison.json").is_file() and (tmp_path / "cmp" / "comparison.csv").is_file()


def test_tool_stats_prints_context_tokens_per_call_and_llm_tokens_when_a_tool_made_llm_calls(tmp_path):
    calls = [accounted(c, 100 * (i + 1), prompt=30, completion=10) if c["tool_name"] == SPARSE else
             accounted(c, 100 * (i + 1)) if c["tool_name"] == DENSE else c for i, c in enumerate(GATEWAY_CALLS)]
    run = make_run(tmp_path, "run_a", calls, TASKS, mode="hybrid")
    result = cli("tool-stats", run)
    assert result.returncode == 0, result.stderr
    per_tool = headers(result.stdout, "tool_name")[0]
    assert per_tool[-5:] == ["ctx tok p50", "ctx tok p95", "ctx tok mean", "LLM tok/call", "failures"]
    sparse = next(line for line in result.stdout.splitlines() if line.startswith(f"│ {SPARSE}"))
    # c2 (ledger line 2) and c8 (line 8): 200 and 800 context tokens, 40 LLM tokens each.
    assert [c.strip() for c in sparse.strip("│").split("│")][10:14] == ["500.0", "770.0", "500.0", "40.0"]
    assert "9 calls · 3 failed · success 66.7% · 3 tasks · 2 workers · 7 reported accounting" in result.stdout
