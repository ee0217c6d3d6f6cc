"""`rollout report compare` pairs runs of one question set and says which one; runs of two are refused unless asked
for, and then each run's set is shown beside it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rollout.report.cli import main
from rollout.run_folder import FINGERPRINT_FILE
from tests.demo_runs import DemoRuns
from tests.report.runs import task, write_jsonl


def run_of(root: Path, name: str, questions: str, digest: str, *, dataset: str | None = None) -> Path:
    """A run of two tasks over the question file `questions`.jsonl of the dataset `dataset` (default: named after the
    file, as `dataset=files` names it), whose questions hash to `digest` * 64."""
    run = root / questions / name
    write_jsonl(run / "trajectory.jsonl", [task("t1", "w0", [], []), task("t2", "w0", [], [])])
    (run / "config.yaml").write_text(
        f"mode_name: {name}\ndataset:\n  name: {dataset or questions}\n  kind: files\n"
        f"  questions:\n    path: /data/{questions}.jsonl\n", encoding="utf-8")
    (run / "fingerprint.json").write_text(json.dumps({"dataset": {"corpus": "c" * 64, "questions": digest * 64}}))
    return run


def questions_hash(run: Path) -> str:
    return json.loads((run / FINGERPRINT_FILE).read_text())["dataset"]["questions"]


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


def per_mode_table(out: str) -> list[list[str]]:
    """The cells of the printed per-mode table, its header row first."""
    table = out.split("per mode", 1)[1].split("tool calls per task", 1)[0]
    return [[cell.strip() for cell in line.strip("┃│ ").split("┃" if "┃" in line else "│")]
            for line in table.splitlines() if line.startswith(("┃", "│"))]


@pytest.fixture(scope="module")
def demo(demo_runs: DemoRuns) -> dict[str, Path]:
    """Real runs: dense and sparse over the shared small knowledge base's 40 questions, and dense over a knowledge
    base of the same passages generating 20 questions (another question set; 8 of them asked)."""
    return {"dense": demo_runs["dense"], "sparse": demo_runs["sparse"],
            "dense20": demo_runs.get("dense", "dataset.n_questions=20", "dataset.limit=8").folder}


def test_runs_of_one_set_are_named_in_one_line_above_the_tables(demo, tmp_path, capsys):
    assert main(["compare", str(demo["dense"]), str(demo["sparse"]), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    digest = questions_hash(demo["dense"])
    line = f"question set: demo n_passages=400 n_questions=40 seed=0 (40 questions, hash {digest[:8]})"
    assert out.splitlines()[0] == line
    assert "question set" not in per_mode_table(out)[0]  # said once, not per run
    assert f"Question set: {line.removeprefix('question set: ')}." in (tmp_path / "comparison.md").read_text()
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert data["question_set"] == {"name": "demo n_passages=400 n_questions=40 seed=0", "sha256": digest}
    with (tmp_path / "comparison.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["mode"], r["question_set_sha256"], r["questions"]) for r in rows] == [("dense", digest, "40"),
                                                                                     ("sparse", digest, "40")]


def test_runs_of_different_sets_show_each_runs_set_beside_it(demo, tmp_path, capsys):
    dense, dense20 = demo["dense"], demo["dense20"]
    assert questions_hash(dense) != questions_hash(dense20)
    assert main(["compare", str(dense), str(dense20), "--out", str(tmp_path)]) == 2
    assert "--allow-different-questions" in capsys.readouterr().err
    assert main(["compare", str(dense), str(dense20), "--out", str(tmp_path), "--allow-different-questions"]) == 0
    out = capsys.readouterr().out
    assert not out.startswith("question set:")
    header, *rows = per_mode_table(out)
    assert header[:3] == ["mode", "question set", "tasks"]
    sets = {f"demo n_passages=400 n_questions={n} seed=0 ({questions_hash(run)[:8]})" for n, run in ((40, dense),
                                                                                                   (20, dense20))}
    assert {row[1] for row in rows} == sets
    md = (tmp_path / "comparison.md").read_text()
    assert "| mode | question set | tasks |" in md and all(f"| {s} |" in md for s in sets)
    assert "Question set:" not in md
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert data["question_set"] is None
    assert [(r["question_set"]["sha256"], r["questions"]) for r in data["runs"]] == [(questions_hash(dense), 40),
                                                                                   (questions_hash(dense20), 8)]


def test_own_data_is_named_by_its_dataset_and_question_file(tmp_path, capsys):
    qa = run_of(tmp_path, "dense", "qa", "a")  # dataset=files: named after the file
    nq = run_of(tmp_path, "dense", "test", "b", dataset="nq")  # dataset=nq on nq/test.jsonl
    assert main(["compare", str(qa), str(nq), "--out", str(tmp_path), "--allow-different-questions"]) == 0
    header, *rows = per_mode_table(capsys.readouterr().out)
    assert [header[1], *(row[1] for row in rows)] == ["question set", "qa (aaaaaaaa)", "nq/test (bbbbbbbb)"]
    # One set, each run asking part of it: how many questions each run asked.
    limited = run_of(tmp_path / "limited", "sparse", "qa", "a")
    write_jsonl(limited / "trajectory.jsonl", [task("t1", "w0", [], [])])
    assert main(["compare", str(qa), str(limited), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "question set: qa (1 to 2 questions per run, hash aaaaaaaa)"
