"""The summary is on screen as soon as it exists: before Ray shuts down and the gateway stops, with every record kept."""

import json
import os
import subprocess
import sys

from rollout.paths import PROJECT_ROOT


def test_the_summary_comes_before_the_shutdown_and_the_tool_report_counts_every_call(cache_dir, tmp_path):
    out = tmp_path / "run"
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    # One stream for the log (stderr) and the summary (stdout): their order is the order the user sees.
    done = subprocess.run(
        [sys.executable, "-m", "rollout", "mode=sparse", "dataset.n_passages=400", "dataset.n_questions=40",
         "dataset.limit=6", "workers=1", "progress=false", f"cache_dir={cache_dir}", f"output_dir={out}", "-v"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": pythonpath})
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    summary = first("rollout · mode=sparse")
    assert summary < first("Shut down the run's Ray") and summary < first("Stopped the gateway")
    assert first("Timeline (seconds since start)") < summary < first("Timeline after the summary")
    # Nothing is lost for the early summary: every task is in the trajectory, and the tool report, written once the
    # gateway has stopped, counts every call of its ledger.
    assert len((out / "trajectory.jsonl").read_text().splitlines()) == 6
    ledger = (out / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()
    report = json.loads((out / "tool_stats" / "report.json").read_text())
    assert ledger and report["summary"]["total_calls"] == len(ledger)
