"""`rollout.report.compare.comparison` and `python -m rollout.report compare`: numbers checkable by hand.

Two hand-written runs over questions t0..t9 plus a few that only one run has, one repeat each:
- dense  (baseline): right on t0..t3; t11 only here, an error. 11 tasks, 10 scored, EM 4/10.
- sparse:            right on t0, t1, t4..t8; t9 timed out; t10 only here, right; t12 hit an
                     infrastructure failure after a right answer. 12 tasks, 10 scored, EM 8/10.
Failed tasks are not scored, so the questions both runs scored are t0..t8: 5 wrong→right (t4..t8),
2 right→wrong (t2, t3), EM 4/9 → 7/9, +1/3; t9 (baseline only) and t10 (sparse only) are not shared.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from rollout.errors import NotARunFolderError, ReportError
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.paired import bootstrap_ci
from rollout.report.compare.run_folders import find_runs
from rollout.report.compare.tables import (
    COMPARISON_CSV,
    COMPARISON_JSON,
    COMPARISON_MD,
    COMPARISON_PNG,
    comparison_tables,
    write_comparison,
)
from tests.report.runs import DENSE, SPARSE, write_jsonl
from tests.report.test_cli import cli


def result(i: int, right: bool, calls: list[dict], *, status: str = "ok", gold_docs=(), tokens=None) -> dict:
    """One trajectory line for task t{i} whose gold answer is "answer {i}"."""
    return {
        "id": f"t{i}", "question": f"question {i}", "golden_answers": [f"Answer {i}"],
        "prediction": f"the answer {i}." if right else ("" if status != "ok" else "something else"),
        "tool_calls": calls, "turns": len(calls) + 1,
        "error": None if status == "ok" else f"{status} happened", "status": status,
        "worker_id": "w0", "latency_s": 0.5, "metadata": {"gold_doc_ids": list(gold_docs)},
        "usage": {} if tokens is None else {"total_tokens": tokens},
        "messages": [{"role": "user", "content": "long"}], "events": [{"type": "completion", "prediction": "", "turns": 1}],
    }


def call(tool: str, latency: float, ids=()) -> dict:
    return {"name": tool, "arguments": {"query": "q"}, "latency_ms": latency, "ok": True, "outcome": "ok",
            "error": None, "result_ids": list(ids)}


def dense_tasks() -> list[dict]:
    tasks = []
    for i in [*range(10), 11]:
        # Gold doc d{i} on every task; the dense call retrieves it on t0..t4 only: recall 5/11.
        calls = [call(DENSE, 10.0 * (len(tasks) + 1), ids=[f"d{i}"] if i < 5 else ["zz"])]
        tasks.append(result(i, i < 4, calls, status="error" if i == 11 else "ok", gold_docs=[f"d{i}"], tokens=100))
    return tasks


def sparse_tasks() -> list[dict]:
    right = {0, 1, 4, 5, 6, 7, 8, 10}
    status = {9: "timeout", 12: "infra_error"}
    return [
        result(i, i in right or i == 12, [call(SPARSE, 1.0), call(SPARSE, 3.0)], status=status.get(i, "ok"))
        for i in [*range(10), 10, 12]
    ]


def make(root, folder: str, mode: str | None, tasks: list[dict]):
    run = root / folder
    write_jsonl(run / "trajectory.jsonl", tasks)
    if mode is not None:
        (run / "config.yaml").write_text(f"mode_name: {mode}\nworkers: 2\n", encoding="utf-8")
    return run


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "results" / "demo"
    return make(root, "a_dense", "dense", dense_tasks()), make(root, "b_sparse", "sparse", sparse_tasks())


def test_rows_are_the_scores_of_each_run(runs):
    c = compare_runs(runs)
    dense, sparse = c.rows
    assert (dense.label, dense.tasks, sparse.label, sparse.tasks) == ("dense", 11, "sparse", 12)
    assert (dense.scored, sparse.scored, dense.repeats) == (10, 10, 1)
    assert dense.exact_match == 0.4 and sparse.exact_match == 0.8  # failed tasks left out, not wrong
    assert dense.contains_answer == 0.4
    assert dense.retrieval_recall == 0.5 and sparse.retrieval_recall is None  # t0..t4 of t0..t9
    assert dense.calls_per_task == {DENSE: 1.0} and sparse.calls_per_task == {SPARSE: 2.0}
    assert (dense.latency_p50_ms, dense.latency_p95_ms) == (60.0, 105.0)  # 10..110 ms
    assert (sparse.latency_p50_ms, sparse.latency_p95_ms) == (2.0, 3.0)  # 1,3 ×12: linear p95 lands on 3
    assert (dense.errors, dense.timeouts, dense.infra_errors) == (1, 0, 0)
    assert (sparse.errors, sparse.timeouts, sparse.infra_errors) == (0, 1, 1)
    assert dense.tokens_per_task == 100.0 and sparse.tokens_per_task is None
    assert c.tools == [DENSE, SPARSE]


def test_pairing_counts_flips_on_shared_tasks(runs):
    c = compare_runs(runs)
    assert c.baseline == "dense"
    (p,) = c.pairs
    assert (p.label, p.baseline, p.shared, p.only_in_run, p.only_in_baseline) == ("sparse", "dense", 9, 1, 1)
    assert (p.wrong_to_right, p.right_to_wrong) == (5, 2)
    assert p.em_baseline == pytest.approx(4 / 9) and p.em_run == pytest.approx(7 / 9)
    assert p.em_diff == pytest.approx(1 / 3)
    assert p.ci_low < 1 / 3 < p.ci_high
    # 9 questions, differences +1×5, -1×2, 0×2: bootstrap sd ≈ sqrt((7/9 - 1/9) / 9) ≈ 0.27.
    assert -0.3 < p.ci_low < 0.1 and 0.6 < p.ci_high <= 1.0
    assert list(p.metrics) == ["exact_match", "f1", "contains_answer", "retrieval_recall"]
    for m in ("f1", "contains_answer"):  # right answers are exact here, so these move with EM
        d = p.metrics[m]
        assert (d.questions, d.diff, d.ci_low, d.ci_high) == (9, pytest.approx(1 / 3), p.ci_low, p.ci_high)
    recall = p.metrics["retrieval_recall"]  # sparse has no gold passages: nothing to pair
    assert (recall.questions, recall.diff, recall.ci_low) == (0, None, None)


def test_the_baseline_can_be_chosen(runs):
    c = compare_runs(runs, baseline="sparse")
    (p,) = c.pairs
    assert (c.baseline, p.label) == ("sparse", "dense")
    assert (p.wrong_to_right, p.right_to_wrong) == (2, 5)
    assert p.em_diff == pytest.approx(-1 / 3)
    with pytest.raises(ReportError, match="nope.*dense, sparse"):
        compare_runs(runs, baseline="nope")


def test_the_ci_is_deterministic_and_follows_the_seed(runs):
    a, b = compare_runs(runs).pairs[0], compare_runs(runs).pairs[0]
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    # With 10 tasks every resample mean is a multiple of 0.1; continuous differences show the seed.
    diffs = np.linspace(-1.0, 1.0, 37) ** 3
    assert bootstrap_ci(diffs, seed=0) == bootstrap_ci(diffs, seed=0)
    assert bootstrap_ci(diffs, seed=0) != bootstrap_ci(diffs, seed=1)


def test_bootstrap_ci_matches_the_normal_approximation():
    assert bootstrap_ci(np.full(7, 0.5)) == (0.5, 0.5)  # every resample has the same mean
    diffs = np.array([1.0] * 100 + [0.0] * 300)  # mean 0.25, sd of the mean sqrt(0.1875/400) ≈ 0.0217
    low, high = bootstrap_ci(diffs)
    assert low == pytest.approx(0.25 - 1.96 * 0.02165, abs=0.01)
    assert high == pytest.approx(0.25 + 1.96 * 0.02165, abs=0.01)
    with pytest.raises(ValueError):
        bootstrap_ci(np.array([]))


def test_a_parent_folder_stands_for_its_runs(runs, tmp_path):
    root = runs[0].parent
    (root / "not_a_run").mkdir()  # subfolders without a trajectory are not runs
    (root / "comparison.md").write_text("old")
    assert find_runs([root]) == list(runs)
    assert find_runs([root, runs[1]]) == list(runs)  # named twice, compared once
    with pytest.raises(NotARunFolderError, match="no trajectory.jsonl here or in its subfolders"):
        find_runs([root / "not_a_run"])
    with pytest.raises(NotARunFolderError, match="no such folder"):
        find_runs([tmp_path / "nowhere"])


def test_two_runs_of_one_mode_are_told_apart_by_folder(tmp_path):
    a = make(tmp_path, "first", "dense", dense_tasks())
    b = make(tmp_path, "second", "dense", dense_tasks())
    c = compare_runs([a, b])
    assert [r.label for r in c.rows] == ["dense (first)", "dense (second)"]
    (p,) = c.pairs
    assert (p.shared, p.wrong_to_right, p.right_to_wrong) == (10, 0, 0)
    for d in p.metrics.values():  # identical runs: every difference and its CI is exactly 0
        assert (d.questions, d.diff, d.ci_low, d.ci_high) == (10, 0, 0, 0)


def test_a_run_without_config_is_named_by_its_folder(tmp_path):
    run = make(tmp_path, "hybrid", None, dense_tasks())
    c = compare_runs([run])
    assert [r.label for r in c.rows] == ["hybrid"] and c.pairs == []


def test_a_half_written_line_is_skipped_with_a_warning(runs, caplog):
    with (runs[1] / "trajectory.jsonl").open("a") as f:
        f.write('{"id": "t12", "question": "cut sh')
    c = compare_runs(runs)
    assert c.rows[1].tasks == 12
    assert "trajectory.jsonl:13" in caplog.text


def test_files_are_written(runs, tmp_path):
    written = write_comparison(compare_runs(runs), tmp_path / "out")
    assert sorted(p.name for p in written) == sorted([COMPARISON_CSV, COMPARISON_JSON, COMPARISON_MD, COMPARISON_PNG])
    md = (tmp_path / "out" / COMPARISON_MD).read_text()
    assert "sparse vs dense: EM +0.333 [95% CI " in md
    assert "on 9 shared questions; 5 wrong→right, 2 right→wrong; F1 +0.333 [" in md
    assert "; 2 question ids not shared" in md
    assert "| dense | 11 | 10 | 0.400 | " in md and f"![comparison]({COMPARISON_PNG})" in md
    assert "| sparse | contains | 9 | 0.444 | 0.778 | +0.333 | [" in md
    assert "| sparse | recall | 0 | - | - | - | - |" in md
    png = (tmp_path / "out" / COMPARISON_PNG).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # The same numbers for programs: unrounded in the JSON, the per-mode table in the CSV.
    data = json.loads((tmp_path / "out" / COMPARISON_JSON).read_text())
    assert data["baseline"] == "dense" and [r["label"] for r in data["runs"]] == ["dense", "sparse"]
    (pair,) = data["pairs"]
    assert pair["label"] == "sparse" and pair["shared"] == 9 and pair["not_shared"] == 2
    assert pair["wrong_to_right"] == 5 and pair["metrics"]["contains_answer"]["diff"] == pytest.approx(0.778 - 0.444, abs=1e-3)
    rows = list(csv.DictReader((tmp_path / "out" / COMPARISON_CSV).open()))
    assert [(r["label"], r["tasks"], r["scored"], float(r["exact_match"])) for r in rows] == [
        ("dense", "11", "10", pytest.approx(0.4)), ("sparse", "12", "10", pytest.approx(0.8))]


def test_cli_compares_a_parent_folder_and_writes_beside_the_runs(runs):
    root = runs[0].parent
    r = cli("compare", root)
    assert r.returncode == 0, r.stderr
    assert "sparse vs dense: EM +0.333" in r.stdout
    for title in ("per mode", "tool calls per task", "against dense", "flips against dense"):
        assert title in r.stdout
    assert (root / COMPARISON_MD).is_file() and (root / COMPARISON_PNG).stat().st_size > 0
    assert f"Wrote: {root.resolve() / COMPARISON_MD}" in r.stdout


def test_cli_baseline_and_out(runs, tmp_path):
    r = cli("compare", *runs, "--baseline", "sparse", "--out", tmp_path / "cmp")
    assert r.returncode == 0, r.stderr
    assert "dense vs sparse: EM -0.333" in r.stdout
    assert (tmp_path / "cmp" / COMPARISON_MD).is_file()


@pytest.mark.parametrize(
    ("make_path", "words"),
    [
        (lambda tmp: tmp / "nowhere", ["nowhere", "no such folder"]),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", ["empty", "trajectory.jsonl", "python -m rollout"]),
    ],
)
def test_cli_bad_folder_is_one_line_and_exit_2(tmp_path, make_path, words):
    path = make_path(tmp_path)
    r = cli("compare", path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words)


def test_cli_unknown_baseline_is_one_line_and_exit_2(runs):
    r = cli("compare", *runs, "--baseline", "hybrid")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --baseline hybrid: no run has this mode; the runs are: dense, sparse"


def repeated(i: int, right: list[bool], *, found: list[bool], status: list[str] | None = None) -> list[dict]:
    """Question t{i} asked len(right) times (records with `repeat`); gold passage d{i} found where `found`."""
    records = []
    for r, (ok, hit) in enumerate(zip(right, found, strict=True)):
        rec = result(i, ok, [call(DENSE, 5.0, ids=[f"d{i}"] if hit else ["zz"])], gold_docs=[f"d{i}"],
                     status=(status or ["ok"] * len(right))[r])
        records.append({**rec, "repeat": r, "seed": 100 + r})
    return records


def test_questions_are_the_unit_and_repeats_are_averaged_first(tmp_path):
    # Two repeats per question. Baseline: right (and gold found) in repeat 0 only, so 0.5 per question;
    # the run: right in both, 1.0 per question. Every question differs by exactly +0.5, so the
    # bootstrap over questions has nothing to vary: CI [0.5, 0.5]. (Pairing records instead would
    # mix differences of 0 and 1 and give a wide interval.)
    base = make(tmp_path, "base", "dense", [r for i in range(4) for r in repeated(i, [True, False], found=[True, False])])
    run = make(tmp_path, "run", "hybrid", [r for i in range(4) for r in repeated(i, [True, True], found=[True, True])])
    c = compare_runs([base, run])
    assert [(r.tasks, r.scored, r.repeats) for r in c.rows] == [(8, 8, 2), (8, 8, 2)]
    (p,) = c.pairs
    assert p.shared == 4
    for d in p.metrics.values():
        assert (d.questions, d.baseline, d.run, d.diff, d.ci_low, d.ci_high) == (4, 0.5, 1.0, 0.5, 0.5, 0.5)
    # Right means a repeat-averaged EM above 0.5: the baseline's 0.5 is wrong, the run's 1.0 right.
    assert (p.wrong_to_right, p.right_to_wrong) == (4, 0)


def test_a_question_with_a_failed_repeat_is_averaged_over_the_rest(tmp_path):
    # q0's second repeat hit the infrastructure: q0 is scored on its first repeat alone (right);
    # q1 has no scored repeat at all and so is not shared.
    base = make(tmp_path, "base", "dense", [*repeated(0, [True, True], found=[True, True]),
                                            *repeated(1, [True, True], found=[True, True])])
    run = make(tmp_path, "run", "hybrid", [
        *repeated(0, [True, False], found=[True, True], status=["ok", "infra_error"]),
        *repeated(1, [True, True], found=[True, True], status=["timeout", "infra_error"]),
    ])
    c = compare_runs([base, run])
    assert (c.rows[1].scored, c.rows[1].timeouts, c.rows[1].infra_errors) == (1, 1, 2)
    (p,) = c.pairs
    assert (p.shared, p.only_in_baseline, p.em_diff, p.right_to_wrong) == (1, 1, 0.0, 0)
    # Scored as wrong answers instead, q0 is right in 1 of 2 and q1 in none.
    (p,) = compare_runs([base, run], score_failed=True).pairs
    assert (p.shared, p.em_run, p.em_diff, p.right_to_wrong) == (2, 0.25, -0.75, 2)


def test_the_table_counts_failed_tasks_per_run(runs):
    (title, headers, rows), *_ = comparison_tables(compare_runs(runs))
    cells = [dict(zip(headers, row, strict=True)) for row in rows]
    assert [(c["tasks"], c["scored"], c["errors"], c["timeouts"], c["infra"]) for c in cells] == [
        ("11", "10", "1", "0", "0"), ("12", "10", "0", "1", "1")]


def test_cli_prints_the_infra_column_and_every_metric(runs):
    r = cli("compare", *runs)
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "timeouts" in line)
    assert "infra" in header
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in r.stdout.splitlines() if line.startswith("│ sparse")]
    paired = {row[1]: row for row in cells if len(row) == 7}  # mode, metric, questions, dense, mode value, Δ, CI
    assert sorted(paired) == ["EM", "F1", "contains", "recall"]
    assert paired["EM"][2:6] == ["9", "0.444", "0.778", "+0.333"] and paired["EM"][6].startswith("[")
