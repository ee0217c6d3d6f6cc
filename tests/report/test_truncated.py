"""Answers cut at the model's token limit are counted apart from wrong ones: in the summary (evaluation_summary.json
and the printed table) and in `report compare` (a "truncated" column per run).

Hand-built records, one repeat each: t0 right; t1 wrong; t2 and t3 answered with their reply cut at max_tokens (t2's
cut answer still right, t3's wrong); t4 an error. Five records, four scored (ok), two truncated.
"""

from __future__ import annotations

import json

from rich.console import Console

from rollout.events import CompletionEvent, LLMOutputEvent
from rollout.records import Question, TaskResult
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.tables import comparison_json, comparison_tables
from rollout.report.printed import print_summary
from rollout.report.scoring import score_task, summarize
from rollout.summary import RunSummary
from tests.report.runs import write_jsonl


def answered(i: int, prediction: str, finish_reason: str = "stop") -> TaskResult:
    events = [LLMOutputEvent(t=0.0, turn=1, content=prediction, finish_reason=finish_reason),
              CompletionEvent(t=0.0, prediction=prediction, turns=1)]
    return TaskResult.answered(Question(f"t{i}", f"question {i}", ["Kelmor"]), prediction=prediction, turns=1,
                               messages=[], usage={}, calls=[], events=events, worker_id="w0", latency_s=0.1)


def records() -> list[TaskResult]:
    failed = TaskResult.failed(Question("t4", "question 4", ["Kelmor"]), status="error", error="LLMError: refused",
                               events=[LLMOutputEvent(t=0.0, turn=1, finish_reason="length")])
    return [answered(0, "Kelmor"), answered(1, "Dravia"), answered(2, "Kelmor", "length"),
            answered(3, "Arlen Voss was born in the port ci", "length"), failed]


def test_a_cut_answer_keeps_status_ok_and_is_flagged():
    cut = answered(3, "Arlen Voss was born in", "length")
    assert (cut.status, cut.truncated) == ("ok", True)
    assert score_task(cut)["truncated"] is True and score_task(cut)["exact_match"] == 0.0
    assert TaskResult.from_json(cut.to_json()).truncated is True


def test_the_summary_counts_truncated_answers_among_the_scored():
    summary = summarize(records(), mode="m", gateway_file="g.json", wall_time_s=1.0)
    assert (summary.n, summary.scored, summary.truncated) == (5, 4, 2)
    assert summary.metrics["exact_match"] == 0.5  # t0 and t2: a cut answer is scored as it stands
    data = summary.to_json()
    assert data["truncated"] == 2 and data["statuses"]["ok"] == 4
    assert RunSummary.from_json(json.loads(json.dumps(data))) == summary
    older = {k: v for k, v in data.items() if k != "truncated"}  # a file written before finish reasons were kept
    assert RunSummary.from_json(older).truncated == 0


def test_the_printed_summary_has_a_truncated_column():
    console = Console(record=True, width=200)
    print_summary(summarize(records(), mode="m", gateway_file="g.json", wall_time_s=1.0), "out", console)
    lines = console.export_text().splitlines()
    header = next(i for i, line in enumerate(lines) if "truncated" in line)
    columns = lines[header].split()
    cells = lines[header + 2].split()  # under the rule line
    assert cells[columns.index("truncated")] == "2"


def test_report_compare_has_a_truncated_column_per_run(tmp_path):
    root = tmp_path / "results" / "demo"
    cut = records()
    whole = [answered(i, "Kelmor") for i in range(4)]
    for folder, mode, tasks in (("a_whole", "whole", whole), ("b_cut", "cut", cut)):
        write_jsonl(root / folder / "trajectory.jsonl", [t.to_json() for t in tasks])
        (root / folder / "config.yaml").write_text(f"mode_name: {mode}\n", encoding="utf-8")
    comparison = compare_runs([root], resamples=100)
    _, headers, rows = comparison_tables(comparison)[0]
    column = headers.index("truncated")
    assert {row[0]: row[column] for row in rows} == {"whole": "0", "cut": "2"}
    assert [r["truncated"] for r in comparison_json(comparison)["runs"]] == [0, 2]
