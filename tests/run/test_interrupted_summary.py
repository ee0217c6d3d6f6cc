"""The summary a run prints after Ctrl-C counts the calls its unfinished tasks made, from the ledger lines stamped
since the run started (the driver's `Timeline`), and none of an earlier run's."""

from __future__ import annotations

import time

from rollout.run.config import compose_run_config
from rollout.run.finish import score_and_print
from rollout.run.timeline import Timeline
from rollout.summary import ToolUse
from tests.report.runs import DENSE, gw, make_run


def test_an_interrupted_runs_summary_counts_the_calls_made_since_it_started(tmp_path, capsys):
    timeline = Timeline()
    earlier = gw("old", DENSE, "q0", "w0", 1.0, timeline.started_at - 60)
    since = [gw(f"c{i}", DENSE, f"q{i}", "w0", 1.0, time.time()) for i in range(3)]
    out = make_run(tmp_path, "hybrid", [earlier, *since], [], mode="hybrid")
    cfg = compose_run_config("mode=hybrid", f"output_dir={out}")

    summary = score_and_print(out, cfg.scoring_config(), None, object(), timeline, True, set(), [], {})

    assert not summary.complete and summary.unfinished_calls == {DENSE: ToolUse(3, 0)}
    assert "Interrupted: 3 of these tool calls were made by tasks that had not finished" in capsys.readouterr().out
