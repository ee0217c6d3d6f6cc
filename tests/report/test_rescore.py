"""`rescore` and `rollout report rescore`: a summary rebuilt from the folder on the run's own scoring path; and
extra metrics in `report compare`, present on both sides or on one."""

from __future__ import annotations

import json
import shutil

import pytest

from rollout.errors import ConfigError, NotARunFolderError
from rollout.report.cli import main
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.tables import comparison_json, comparison_tables, pair_sentence
from rollout.report.extra_scores import read_scores, write_scores
from rollout.report.rescore import rescore
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run_folder import read_summary, summary_path
from tests.report.runs import write_jsonl
from tests.report.test_user_scorers import SAMPLES, line

SCORER = "rollout.report.example_scorers:gold_share"


def make_run(folder, mode, predictions, *, scorers=(), repeats=1):
    write_jsonl(folder / "trajectory.jsonl", [line(f"q{i}", p) for i, p in enumerate(predictions)])
    (folder / "config.yaml").write_text(
        f"mode_name: {mode}\ngateway_config_path: conf/gateways/rag_{mode}.json\nscore_failed: false\n"
        f"repeats: {repeats}\nscoring:\n  scorers: {json.dumps(list(scorers))}\n", encoding="utf-8")
    return folder


def test_rescore_adds_a_judges_metrics_and_keeps_what_the_trajectory_cannot_tell(tmp_path):
    folder = make_run(tmp_path, "dense", ["Paris", "Lyon"], scorers=[f"{SAMPLES}:answer_length"])
    summary_path(folder).write_text(json.dumps({
        "n": 2, "metrics": {"exact_match": 0.0}, "mode": "dense", "gateway_file": "g", "tool_calls": {},
        "tool_calls_per_task": 0.0, "wall_time_s": 12.5, "complete": False, "deterministic_agent": True,
        "degraded_tools": {"t": "no schema"}}), encoding="utf-8")
    write_scores(folder, "judge", [{"id": "q1", "repeat": 0, "metrics": {"judge_correct": 1.0}}],
                 meta={"source": "judge"})
    s = rescore(folder)
    assert (s.wall_time_s, s.complete, s.deterministic_agent, s.degraded_tools) == (12.5, False, True, {"t": "no schema"})
    assert s.metrics["exact_match"] == 0.5 and s.metrics["judge_correct"] == 1.0 and s.metrics["answer_length"] == 1.0
    assert s.scoring.scorers == [f"{SAMPLES}:answer_length"] and s.scoring.score_files == ["judge.jsonl", "user.jsonl"]
    assert read_summary(folder) == s


def test_rescore_leaves_out_repeats_the_config_no_longer_asks(tmp_path):
    folder = make_run(tmp_path, "dense", ["Paris"], repeats=1)
    with (folder / "trajectory.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(line("q0", "Lyon", repeat=1)) + "\n")
    assert rescore(folder).n == 1


def test_a_scorer_given_on_the_command_line_replaces_the_configured_ones_and_the_table_shows_it(tmp_path, capsys):
    folder = make_run(tmp_path / "run", "dense", ["Paris", "in Paris today"])
    assert main(["rescore", str(folder), "--scorer", f"{SAMPLES}:answer_length"]) == 0
    out = capsys.readouterr().out
    assert "answer_length" in out and "2.000" in out  # (1 + 3) / 2
    assert read_scores(folder).metrics == ("answer_length",)


def test_rescore_of_a_folder_that_is_not_a_run_or_with_a_bad_scorer_is_one_line(tmp_path, capsys):
    assert main(["rescore", str(tmp_path)]) == 2
    assert "no trajectory.jsonl" in capsys.readouterr().err
    with pytest.raises(NotARunFolderError):
        rescore(tmp_path)
    folder = make_run(tmp_path / "run", "dense", ["Paris"])
    assert main(["rescore", str(folder), "--scorer", "nowhere:f"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: scorer 'nowhere:f': cannot import 'nowhere'") and err.count("\n") == 1


def test_compare_pairs_an_extra_metric_both_runs_have_and_lists_one_only_a_run_has(tmp_path):
    dense = make_run(tmp_path / "dense", "dense", ["Paris", "Lyon", "Paris"])
    sparse = make_run(tmp_path / "sparse", "sparse", ["Paris", "Paris", "Paris"])
    for folder, right in ((dense, [1, 0, 1]), (sparse, [1, 1, 1])):
        write_scores(folder, "judge", [{"id": f"q{i}", "repeat": 0, "metrics": {"judge_correct": r}}
                                       for i, r in enumerate(right)])
    write_scores(sparse, "user", [{"id": "q0", "repeat": 0, "metrics": {"cites": 2}}])
    c = compare_runs([dense, sparse])
    (p,) = c.pairs
    d = p.metrics["judge_correct"]
    assert (d.questions, d.baseline, d.run, d.diff) == (3, pytest.approx(2 / 3), 1.0, pytest.approx(1 / 3))
    assert "cites" not in p.metrics and p.missing == {"cites": "dense"}
    assert "judge_correct +0.333" in pair_sentence(p) and "cites missing in dense" in pair_sentence(p)
    per_mode, _, paired, _ = comparison_tables(c)
    assert per_mode[1][3:9] == ["EM", "F1", "contains", "recall", "judge_correct", "cites"]
    assert [row[8] for row in per_mode[2]] == ["missing", "2.000"]
    assert ["sparse", "cites", "-", "missing in dense", "2.000", "-", "-"] in paired[2]
    runs = comparison_json(c)["runs"]
    assert [r["extra"] for r in runs] == [{"judge_correct": 0.6667},
                                          {"judge_correct": 1.0, "cites": 2.0}]


def test_a_scorer_that_does_not_import_stops_the_run_before_any_task(tmp_path):
    cfg = compose_run_config("mode=sparse", "dataset.limit=2", f"output_dir={tmp_path / 'run'}",
                             "scoring.scorers=[nowhere.at_all:cited]")
    with pytest.raises(ConfigError, match="scorer 'nowhere.at_all:cited': cannot import"):
        run(cfg)
    assert not (tmp_path / "run" / "trajectory.jsonl").exists()


def test_a_real_run_scores_with_its_scorers_and_rescoring_it_agrees(demo_runs, tmp_path):
    made = demo_runs.get("sparse", f"scoring.scorers=[{SCORER}]")
    folder = shutil.copytree(made.folder, tmp_path / "run")
    summary = read_summary(folder)
    assert summary is not None and summary.scoring.scorers == [SCORER]
    values = read_scores(folder)
    assert values.metrics == ("gold_share",) and len(values.tasks) == summary.scored
    assert summary.metrics["gold_share"] is not None and 0.0 < summary.metrics["gold_share"] <= 1.0
    again = rescore(folder)
    assert again.to_json() == summary.to_json()
