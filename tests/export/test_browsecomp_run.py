"""`rollout export RUN --format browsecomp-plus --out DIR`: one run file per query that BrowseComp-Plus' evaluator
reads as its own clients' files, and the leaderboard summary beside DIR, on hand-made records whose numbers are known.

No network here and none of its code in this repository: `evaluator_reads` below does, step for step, what
texttron/BrowseComp-Plus' `scripts_evaluation/evaluate_run.py` (commit 97c637c) does with a run folder before its
judge is asked, each step with the line of that script it comes from.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from rollout.export.cli import main
from rollout.records import Question, TaskResult
from tests.report.browsecomp_runs import (
    AGENT_MODEL,
    FINAL_1,
    FINAL_2,
    KNOWN_VERDICTS,
    TOOL_REPLY_1,
    answer_task,
    call,
    known_tasks,
    write_run,
)


def evaluator_reads(input_dir: Path, evidence: dict[str, list[str]]) -> dict[str, Any]:
    """What evaluate_run.py takes from each run file in `input_dir`, by the lines that read it."""
    json_files = list(input_dir.glob("*.json"))  # L450: every *.json of the folder is a run file
    first = json.loads(json_files[0].read_text(encoding="utf-8"))  # L473
    metadata = first.get("metadata", {}) or {}  # L474
    model = metadata.get("model") if isinstance(metadata, dict) else None  # L475-476
    runs = {}
    for path in json_files:
        run_data = json.loads(path.read_text(encoding="utf-8"))  # L497
        query_id = run_data.get("query_id")  # L502: looked up as str(query_id) in the ground truth (L503)
        assert query_id and isinstance(query_id, str)
        is_completed = run_data["status"] == "completed"  # L509: a KeyError without "status"
        retrieved = set(run_data.get("retrieved_docids", []))  # L510
        positives = evidence.get(str(query_id), [])  # L511: the qrels' docids are strings
        recall = len(retrieved & set(positives)) / float(len(positives))  # L512-514
        response = ""
        if len(run_data["result"]) > 0 and run_data["result"][-1]["type"] == "output_text":  # L517-520
            response = run_data["result"][-1]["output"]  # L521
        tool_call_counts = run_data.get("tool_call_counts", {})  # L536, L566: summed per tool name (L613-617)
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in tool_call_counts.items())
        runs[query_id] = {"judged": response != "" and is_completed, "response": response, "recall": recall,
                          "tool_call_counts": tool_call_counts}
    return {"model": model, "runs": runs}


EVIDENCE = {"1": ["100", "101", "102", "103"], "2": ["110", "111"], "3": ["120"], "4": ["130"], "5": ["140", "141"]}


@pytest.fixture
def known_run(tmp_path) -> Path:
    return write_run(tmp_path / "results" / "bcp_bm25", known_tasks(), verdicts=KNOWN_VERDICTS)


def export(run: Path, out: Path, capsys) -> str:
    assert main([str(run), "--format", "browsecomp-plus", "--out", str(out)]) == 0
    return capsys.readouterr().out


def test_each_query_becomes_a_run_file_the_evaluator_reads_as_its_own(known_run, tmp_path, capsys):
    out = tmp_path / "runs" / "bcp_bm25"
    line = export(known_run, out, capsys)
    assert sorted(p.name for p in out.iterdir()) == ["1.json", "2.json", "3.json", "4.json", "5.json"]
    read = evaluator_reads(out, EVIDENCE)
    assert read["model"] == AGENT_MODEL
    runs = read["runs"]
    # Judged: the two answers; out of turns (3), a failed task (4) and a cut answer (5) are wrong unjudged.
    assert {q: r["judged"] for q, r in runs.items()} == {"1": True, "2": True, "3": False, "4": False, "5": False}
    assert runs["1"]["response"] == FINAL_1 and runs["2"]["response"] == FINAL_2
    assert {q: r["recall"] for q, r in runs.items()} == {"1": 0.5, "2": 0.5, "3": 1.0, "4": 1.0, "5": 0.5}
    assert runs["1"]["tool_call_counts"] == {"search": 2, "get_document": 1}
    assert "wrote 5 run files to" in line and "3 not completed, counted wrong" in line


def test_a_run_file_holds_the_conversation_as_its_clients_record_it(known_run, tmp_path, capsys):
    out = tmp_path / "runs" / "bcp_bm25"
    export(known_run, out, capsys)
    one = json.loads((out / "1.json").read_text(encoding="utf-8"))
    assert list(one) == ["metadata", "query_id", "tool_call_counts", "status", "retrieved_docids", "usage", "result"]
    assert one["metadata"] == {"model": AGENT_MODEL, "rollout_mode": "bcp_bm25", "rollout_run": str(known_run)}
    assert (one["query_id"], one["status"]) == ("1", "completed")
    # The searches' docids (get_document's 101 also came from the second search), sorted.
    assert one["retrieved_docids"] == ["100", "101", "200", "300", "400", "500", "600", "700", "800"]
    assert one["usage"] == {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
    assert one["result"] == [
        {"type": "reasoning", "tool_name": None, "arguments": None, "output": ["Let me search."]},
        {"type": "tool_call", "tool_name": "search", "arguments": '{"query": "a"}', "output": TOOL_REPLY_1},
        {"type": "tool_call", "tool_name": "search", "arguments": '{"query": "b"}', "output": "[...]"},
        {"type": "tool_call", "tool_name": "get_document", "arguments": '{"docid": "101"}',
         "output": "the whole of document 101"},
        {"type": "output_text", "tool_name": None, "arguments": None, "output": FINAL_1},
    ]
    statuses = {p.stem: json.loads(p.read_text())["status"] for p in out.iterdir()}
    assert statuses == {"1": "completed", "2": "completed", "3": "incomplete: out of turns (agent.max_turns)",
                        "4": "infra_error: the gateway timed out",
                        "5": "incomplete: answer cut at the model's token limit"}
    # Out of turns, the agent's last text is its last item, as its clients record it; its status keeps it unjudged.
    three = json.loads((out / "3.json").read_text())["result"]
    assert [(i["type"], i["output"]) for i in three] == [("tool_call", ""),
                                                         ("output_text", "Let me search [120] again.")]


def test_the_leaderboard_summary_beside_the_folder_has_the_numbers_worked_out_by_hand(known_run, tmp_path, capsys):
    out = tmp_path / "runs" / "bcp_bm25"
    line = export(known_run, out, capsys)
    summary_file = tmp_path / "runs" / "bcp_bm25.evaluation_summary.json"
    assert str(summary_file) in line
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    assert list(summary) == ["LLM", "Accuracy (%)", "Recall (%)", "avg_tool_stats", "Search Calls",
                             "Calibration Error (%)", "Retriever", "Link", "Evaluation Date", "per_query_metrics"]
    # Every query counts, as the evaluator counts every file: 1 right of 5 (the failed query 4 is wrong).
    assert summary["LLM"] == AGENT_MODEL and summary["Accuracy (%)"] == 20.0
    assert summary["Recall (%)"] == 70.0  # (0.5 + 0.5 + 1 + 1 + 0.5) / 5
    assert summary["avg_tool_stats"] == {"search": 8 / 5, "get_document": 1 / 5}
    assert summary["Search Calls"] == 8 / 5
    assert summary["Calibration Error (%)"] is None  # 2 judged answers; the evaluator needs 100 (and writes 0)
    assert summary["Retriever"] == summary["Link"] == "change me when submitting"
    assert summary["Evaluation Date"] == date.today().isoformat()
    assert sorted(summary["per_query_metrics"], key=lambda q: q["query_id"]) == [
        {"query_id": "1", "correct": True, "recall": 50.0}, {"query_id": "2", "correct": False, "recall": 50.0},
        {"query_id": "3", "correct": False, "recall": 100.0}, {"query_id": "4", "correct": False, "recall": 100.0},
        {"query_id": "5", "correct": False, "recall": 50.0}]


def test_without_browsecomp_plus_verdicts_accuracy_is_null_and_the_line_says_how_to_get_it(tmp_path, capsys):
    run = write_run(tmp_path / "run", known_tasks())
    line = export(run, tmp_path / "out", capsys)
    summary = json.loads((tmp_path / "out.evaluation_summary.json").read_text())
    assert summary["Accuracy (%)"] is None and summary["Recall (%)"] == 70.0
    assert {q["correct"] for q in summary["per_query_metrics"]} == {None}
    assert "rollout report judge RUN --preset browsecomp_plus" in line


def test_one_file_per_query_of_the_first_repeat_and_unsafe_ids_made_file_names(tmp_path, capsys):
    tasks = [answer_task("a/b", [call("search", ["1"], 1)], "Exact Answer: x", {"evidence_doc_ids": ["1"]})]
    again = answer_task("a/b", [call("search", ["2"], 2)], "Exact Answer: y", {"evidence_doc_ids": ["1"]})
    again.repeat = 1
    run = write_run(tmp_path / "run", [*tasks, again])
    line = export(run, tmp_path / "out", capsys)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a_b.json"]
    assert json.loads((tmp_path / "out" / "a_b.json").read_text())["query_id"] == "a/b"
    assert "1 records of later repeats left out" in line


def test_a_run_on_other_data_exports_too_with_no_evidence(tmp_path, capsys):
    failed = TaskResult.failed(Question("q1", "?", ["a"]), status="error", error="HTTP 400")
    run = write_run(tmp_path / "run", [failed])
    export(run, tmp_path / "out", capsys)
    data = json.loads((tmp_path / "out" / "q1.json").read_text())
    assert data["status"] == "error: HTTP 400" and data["result"] == [] and data["retrieved_docids"] == []
    summary = json.loads((tmp_path / "out.evaluation_summary.json").read_text())
    assert summary["Recall (%)"] is None and summary["per_query_metrics"] == [
        {"query_id": "q1", "correct": None, "recall": None}]


@pytest.mark.parametrize(("argv", "says"), [
    (["{run}", "--format", "browsecomp-plus", "--out", "{tmp}/o", "--only-correct"], "leave out --only-correct"),
    (["{run}", "--format", "browsecomp-plus", "--out", "{run}/trajectory.jsonl"], "is a file"),
    (["{run}", "--format", "browsecomp-plus", "--out", "{tmp}/held"], "already holds 1 .json files"),
    (["--questions", "--format", "browsecomp-plus", "--out", "{tmp}/o"], "pass the run folder"),
    (["{tmp}/nothing", "--format", "browsecomp-plus", "--out", "{tmp}/o"], "no trajectory.jsonl here"),
])
def test_bad_arguments_say_what_to_fix(tmp_path, capsys, argv, says):
    run = write_run(tmp_path / "run", known_tasks()[:1])
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "old.json").write_text("{}")
    argv = [a.format(run=run, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "o").exists() and [p.name for p in (tmp_path / "held").iterdir()] == ["old.json"]


def test_an_empty_folder_is_written_into(tmp_path, capsys):
    run = write_run(tmp_path / "run", known_tasks()[:1])
    (tmp_path / "out").mkdir()
    export(run, tmp_path / "out", capsys)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["1.json"]
