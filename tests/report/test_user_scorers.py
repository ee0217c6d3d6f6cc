"""The user's own scorers: loaded up front with one-line errors, run on scored tasks only, into every summary field."""

from __future__ import annotations

import pytest

from rollout.errors import ConfigError, ReportError
from rollout.report.extra_scores import read_scores
from rollout.report.rescore import RunFacts, ScoringConfig, score_folder
from rollout.report.user_scorers import load_scorer
from rollout.run.config import compose_run_config
from rollout.run.identity import identity_settings
from rollout.run_folder import read_summary
from tests.report.runs import write_jsonl

SAMPLES = "tests.report.sample_scorers"


def line(qid: str, prediction: str, *, repeat: int = 0, status: str = "ok", hops: int = 1) -> dict:
    return {"id": qid, "question": "capital of France?", "golden_answers": ["Paris"], "prediction": prediction,
            "tool_calls": [], "turns": 1, "error": None if status == "ok" else "boom", "worker_id": "w0",
            "latency_s": 0.1, "metadata": {"hops": hops}, "messages": [], "status": status, "repeat": repeat}


def run_folder(tmp_path, lines):
    write_jsonl(tmp_path / "trajectory.jsonl", lines)
    return tmp_path


def score(tmp_path, *scorers, score_failed=False):
    return score_folder(tmp_path, ScoringConfig("dense", "g.json", score_failed, tuple(scorers)), RunFacts())


@pytest.mark.parametrize("spec, message", [
    ("nowhere.at_all:f", r"scorer 'nowhere.at_all:f': cannot import 'nowhere.at_all' \(ModuleNotFoundError"),
    (f"{SAMPLES}:missing", rf"module {SAMPLES} has no 'missing'; its functions: answer_length, broken, paris_checks, wordy"),
    (f"{SAMPLES}:NOT_A_FUNCTION", r"is a int, not a function"),
    ("answer_length", r"name it 'package.module:function'"),
])
def test_a_scorer_that_cannot_be_used_is_a_config_error_naming_it(spec, message):
    with pytest.raises(ConfigError, match=message):
        load_scorer(spec)


def test_both_spellings_of_a_scorer_load_the_same_function():
    assert load_scorer(f"{SAMPLES}:answer_length").fn is load_scorer(f"{SAMPLES}.answer_length").fn


@pytest.mark.parametrize("scorer, message", [
    ("broken", r"scorer tests.report.sample_scorers:broken on task 'q1' \(repeat 0\) raised KeyError: 'citations'\. "
               r"Fix the scorer .*rollout report rescore RUN"),
    ("wordy", r"scorer tests.report.sample_scorers:wordy on task 'q1' \(repeat 0\) returned 'long' \(str\); a scorer "
              r"returns a number, a dict of numbers by metric name, or None"),
])
def test_a_scorer_that_raises_or_returns_no_number_is_one_line_naming_it_and_the_task(tmp_path, scorer, message):
    run_folder(tmp_path, [line("q1", "Paris")])
    with pytest.raises(ReportError, match=message):
        score(tmp_path, f"{SAMPLES}:{scorer}")


def test_user_metrics_join_every_field_of_the_summary_and_only_scored_tasks_get_values(tmp_path):
    run_folder(tmp_path, [
        line("q1", "Paris", repeat=0, hops=1), line("q1", "Lyon", repeat=1, hops=1),
        line("q2", "it is Paris", repeat=0, hops=2), line("q2", "Paris", repeat=1, hops=2),
        line("q3", "Paris", status="error", hops=2),
    ])
    s = score(tmp_path, f"{SAMPLES}:answer_length", f"{SAMPLES}:paris_checks")
    # The failed task is not scored, so no scorer saw it.
    assert sorted(read_scores(tmp_path).tasks) == [("q1", 0), ("q1", 1), ("q2", 0), ("q2", 1)]
    data = s.to_json()
    assert list(data["metrics"]) == ["exact_match", "f1", "contains_answer", "retrieval_recall",
                                     "answer_length", "says_paris", "tool_free"]
    assert data["metrics"]["answer_length"] == pytest.approx(1.5)  # (1 + 1 + 3 + 1) / 4
    assert data["metrics"]["says_paris"] == 0.75 and data["metrics"]["tool_free"] == 1.0  # None left out
    assert data["by_hops"]["2"]["answer_length"] == 2.0 and data["by_repeat"]["1"]["says_paris"] == 0.5
    assert set(data["ci95"]) >= {"answer_length", "says_paris"}
    # pass@k for the binary extra metrics only; EM's stays where old readers find it.
    assert data["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert data["pass_at_k_by_metric"] == {"says_paris": {"1": 0.75, "2": 1.0}, "tool_free": {"1": 1.0, "2": 1.0}}
    assert data["scoring"] == {
        "scorers": [f"{SAMPLES}:answer_length", f"{SAMPLES}:paris_checks"], "score_files": ["user.jsonl"],
        "extra_metrics": {"answer_length": "user", "says_paris": "user", "tool_free": "user"}}
    assert read_summary(tmp_path) == s


def test_with_score_failed_a_failed_task_is_scored_by_the_scorers_too(tmp_path):
    run_folder(tmp_path, [line("q1", "Paris"), line("q3", "Paris", status="error")])
    score(tmp_path, f"{SAMPLES}:answer_length", score_failed=True)
    assert sorted(read_scores(tmp_path).tasks) == [("q1", 0), ("q3", 0)]


def test_scorers_are_not_part_of_the_run_identity_nor_of_its_folder():
    plain = compose_run_config("mode=sparse")
    scored = compose_run_config("mode=sparse", f"scoring.scorers=[{SAMPLES}:answer_length]")
    assert scored.scorers == (f"{SAMPLES}:answer_length",)
    assert scored.output_dir == plain.output_dir and scored.overrides == plain.overrides == ()
    assert identity_settings(scored) == identity_settings(plain)
    assert scored.to_dict()["scoring"] == {"scorers": [f"{SAMPLES}:answer_length"]}


def test_scorers_that_are_not_a_list_are_a_config_error():
    with pytest.raises(ConfigError, match=r"scoring.scorers=.* must be a list"):
        compose_run_config(f"scoring.scorers={SAMPLES}:answer_length")
