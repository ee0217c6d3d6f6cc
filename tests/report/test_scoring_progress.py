"""The progress bar's running EM scores what the summary scores: `ok` tasks only."""

from __future__ import annotations

from rollout.view.progress import RunProgress
from tests.report.test_scoring import task


def test_running_em_skips_failed_tasks_and_infra_errors_are_counted_apart():
    progress = RunProgress(5, enabled=False)
    for t in (task("q1", True), task("q2", False), task("q3", True, status="infra_error"),
              task("q4", True, status="timeout"), task("q5", False, status="error")):
        progress.add(t)
    assert (progress.done, progress.scored, progress.correct, progress.errors, progress.infra) == (5, 2, 1, 2, 1)
    fields = progress._fields()
    assert (fields["em"], fields["errors"], fields["infra"]) == ("0.500", 2, 1)
