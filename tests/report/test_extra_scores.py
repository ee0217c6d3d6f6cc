"""`rollout.report.extra_scores`: scores files written whole, read and merged, and names that collide refused."""

from __future__ import annotations

import json

import pytest

from rollout.errors import ReportError
from rollout.report.extra_scores import ScoreRow, read_scores, scores_path, write_scores
from rollout.summary import RunSummary


def test_scores_files_merge_in_file_name_order_and_a_later_line_replaces_an_earlier_one(tmp_path):
    write_scores(tmp_path, "user", [ScoreRow("q1", 0, {"length": 3.0}), ScoreRow("q2", 0, {"length": None})])
    write_scores(tmp_path, "judge", [{"id": "q1", "repeat": 0, "metrics": {"judge_correct": 0, "not_attempted": 1}}],
                 meta={"source": "llm-judge", "label": "gpt"})
    with scores_path(tmp_path, "judge").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "q1", "repeat": 0, "metrics": {"judge_correct": 1.0, "not_attempted": 0}}) + "\n")
    scores = read_scores(tmp_path)
    assert scores.files == ("judge.jsonl", "user.jsonl")
    assert scores.metrics == ("judge_correct", "not_attempted", "length")
    assert scores.sources == {"judge_correct": "llm-judge", "not_attempted": "llm-judge", "length": "user"}
    assert scores.of(("q1", 0)) == {"judge_correct": 1.0, "not_attempted": 0.0, "length": 3.0}
    assert scores.of(("q2", 0)) == {"judge_correct": None, "not_attempted": None, "length": None}
    assert scores.of(("q3", 0)) == dict.fromkeys(scores.metrics)


def test_a_run_without_scores_files_has_no_extra_metrics(tmp_path):
    scores = read_scores(tmp_path)
    assert scores.metrics == () and scores.tasks == {} and scores.files == ()


def test_a_metric_in_two_files_is_an_error_naming_both(tmp_path):
    write_scores(tmp_path, "judge", [ScoreRow("q1", 0, {"judge_correct": 1.0})])
    write_scores(tmp_path, "user", [ScoreRow("q1", 0, {"judge_correct": 0.0})])
    with pytest.raises(ReportError, match=r"'judge_correct' is in two scores files, .*judge\.jsonl and .*user\.jsonl"):
        read_scores(tmp_path)


def test_a_metric_named_like_a_built_in_one_is_an_error_naming_the_file(tmp_path):
    write_scores(tmp_path, "judge", [ScoreRow("q1", 0, {"exact_match": 1.0})])
    with pytest.raises(ReportError, match=r"judge\.jsonl: metric 'exact_match' is a built-in metric"):
        read_scores(tmp_path)


@pytest.mark.parametrize("line, problem", [
    ('{"id": "q1", "metrics": {"m": "yes"}}', "numbers or null"),
    ('{"id": "q1"}', '"metrics"'),
    ("not json", "not valid JSON"),
])
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path, line, problem):
    path = scores_path(tmp_path, "judge")
    path.parent.mkdir()
    path.write_text('{"id": "q0", "repeat": 0, "metrics": {"m": 1}}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ReportError, match=rf"judge\.jsonl:2: .*{problem}"):
        read_scores(tmp_path)


def test_a_failed_write_leaves_the_earlier_file_as_it_was(tmp_path):
    write_scores(tmp_path, "user", [ScoreRow("q1", 0, {"m": 1.0})])

    def rows():
        yield ScoreRow("q1", 0, {"m": 0.0})
        raise RuntimeError("scorer broke")

    with pytest.raises(RuntimeError):
        write_scores(tmp_path, "user", rows())
    assert read_scores(tmp_path).of(("q1", 0)) == {"m": 1.0}
    assert [p.name for p in scores_path(tmp_path, "user").parent.iterdir()] == ["user.jsonl"]


def test_a_summary_file_written_before_extra_metrics_still_reads():
    old = {"n": 2, "scored": 2, "metrics": {"exact_match": 0.5, "f1": 0.5, "contains_answer": 0.5,
                                            "retrieval_recall": None},
           "mode": "dense", "gateway_file": "g.json", "tool_calls": {}, "tool_calls_per_task": 0.0, "wall_time_s": 1.0,
           "repeats": 2, "by_repeat": {"0": {"n": 1, "exact_match": 1.0}}, "ci95": {"exact_match": None},
           "pass_at_k": {"1": 0.5, "2": 1.0}}
    s = RunSummary.from_json(old)
    assert s.extra_metrics == [] and s.calibration is None and s.scoring.scorers == []
    assert s.repeat_stats is not None and s.repeat_stats.pass_at_k_by_metric == {}
    assert "pass_at_k_by_metric" not in s.to_json() and "calibration" not in s.to_json()
