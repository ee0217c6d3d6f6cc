"""`rollout report compare` pairs runs of one question set; runs of two are refused unless asked for."""

from __future__ import annotations

import json
from pathlib import Path

from rollout.report.cli import main
from tests.report.runs import task, write_jsonl


def run_of(root: Path, name: str, questions: str, digest: str) -> Path:
    run = root / questions / name
    write_jsonl(run / "trajectory.jsonl", [task("t1", "w0", [], []), task("t2", "w0", [], [])])
    (run / "config.yaml").write_text(f"mode_name: {name}\ndataset:\n  name: {questions}\n", encoding="utf-8")
    (run / "fingerprint.json").write_text(json.dumps({"dataset": {"corpus": "c" * 64, "questions": digest * 64}}))
    return run


def test_runs_of_two_question_sets_are_refused_naming_both_and_the_option(tmp_path, capsys):
    dense = run_of(tmp_path, "dense", "qa", "a")
    sparse = run_of(tmp_path, "sparse", "dev", "b")
    assert main(["compare", str(dense), str(sparse), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "qa (aaaaaaaa)" in err and "dev (bbbbbbbb)" in err and "--allow-different-questions" in err
    assert not (tmp_path / "comparison.md").exists()
    assert main(["compare", str(dense), str(sparse), "--out", str(tmp_path), "--allow-different-questions"]) == 0


def test_runs_of_one_question_set_compare(tmp_path):
    assert main(["compare", str(run_of(tmp_path, "dense", "qa", "a")), str(run_of(tmp_path, "sparse", "qa", "a")),
                 "--out", str(tmp_path)]) == 0
