"""`rollout.report.browsecomp_leaderboard`: BrowseComp-Plus' leaderboard numbers of hand-made records, checked by hand
arithmetic, in the run's summary, its printed block and `report compare`."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from rich.console import Console

from rollout.records import Question, TaskResult
from rollout.report.browsecomp_leaderboard import cited_docids, final_response, run_status
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.tables import comparison_json, comparison_tables, write_comparison
from rollout.report.extra_scores import read_scores
from rollout.report.judge.grader import judged_text
from rollout.report.judge.presets import BROWSECOMP_PLUS
from rollout.report.printed import print_summary
from rollout.report.rescore import rescore
from rollout.report.scoring import summarize
from rollout.run_folder import read_summary
from rollout.summary import RunSummary
from tests.report.browsecomp_plus_evaluator import calculate_calibration_error
from tests.report.browsecomp_runs import (
    JUDGE_MODEL,
    KNOWN_VERDICTS,
    answer_task,
    call,
    known_tasks,
    write_run,
    write_verdicts,
)


def summary_of(tasks: list[TaskResult], scores_dir, *, score_failed: bool = False) -> RunSummary:
    return summarize(tasks, mode="bcp_bm25", gateway_file="g", wall_time_s=1.0, score_failed=score_failed,
                     extra=read_scores(scores_dir))


def printed(summary: RunSummary) -> str:
    out = io.StringIO()
    print_summary(summary, "results/bcp/bcp_bm25", Console(file=out, width=300, color_system=None))
    return out.getvalue()


def test_the_known_run_has_the_numbers_worked_out_by_hand(tmp_path):
    write_verdicts(tmp_path, KNOWN_VERDICTS)
    block = summary_of(known_tasks(), tmp_path).to_json()["browsecomp_plus"]
    # Scored: queries 1, 2, 3, 5 (4 failed in the infrastructure, left out as by every metric of the summary).
    # Answered (completed, with a response): 1 and 2; 3 ran out of turns and 5 was cut at max_tokens, so they count as
    # wrong whatever the judge said. Right: 1 of 4.
    assert (block["queries"], block["answered"], block["judged"]) == (4, 2, 2)
    assert block["judge"] == {"preset": "browsecomp_plus", "model": JUDGE_MODEL}
    assert block["Accuracy (%)"] == 25.0
    # Evidence found among the searches' docids: 1: 100, 101 of 4 (get_document's 101 is no search); 2: 110 of 2;
    # 3: 120 of 1; 5: 140 of 2. Mean (0.5 + 0.5 + 1 + 0.5) / 4.
    assert block["Recall (%)"] == 62.5
    # Gold: 1: 101 of 1; 2: none of 111; 3: 120 of 1; 5 has no gold documents.
    assert block["Gold Recall (%)"] == round(100 * 2 / 3, 2) == 66.67
    # Searches 2 + 1 + 3 + 1 over 4 queries; one get_document.
    assert block["Search Calls"] == 1.75 and block["Get Document Calls"] == 0.25
    assert block["calls_per_query"] == {"get_document": 0.25, "search": 1.75}
    # Only answer 1 cites: 100, 101, 102, 999; evidence 100..103: 3 of 4 cited are evidence, 3 of 4 evidence cited.
    assert block["Citation Precision (%)"] == 75.0 and block["Citation Recall (%)"] == 75.0
    assert block["with_citations"] == 1
    assert block["Calibration Error (%)"] is None  # 2 judged answers: BrowseComp-Plus' needs 100


def test_score_failed_counts_the_failed_task_as_a_wrong_answer_with_its_evidence(tmp_path):
    write_verdicts(tmp_path, KNOWN_VERDICTS)
    block = summary_of(known_tasks(), tmp_path, score_failed=True).to_json()["browsecomp_plus"]
    assert (block["queries"], block["answered"]) == (5, 2)
    assert block["Accuracy (%)"] == 20.0  # 1 of 5
    assert block["Recall (%)"] == 70.0  # (0.5 + 0.5 + 1 + 1 + 0.5) / 5: query 4's search found its one
    assert block["Search Calls"] == 1.6  # 8 / 5


def test_the_block_prints_under_the_leaderboards_names_and_says_what_a_missing_number_needs(tmp_path):
    write_verdicts(tmp_path, KNOWN_VERDICTS)
    text = printed(summary_of(known_tasks(), tmp_path))
    assert "BrowseComp-Plus · 4 queries, 2 answered, 2 judged by browsecomp_plus (Qwen/Qwen3-32B)" in text
    header = next(line for line in text.splitlines() if "Accuracy (%)" in line)
    assert [h.strip() for h in header.strip("┃ ").split("┃")] == [
        "Accuracy (%)", "Recall (%)", "Gold Recall (%)", "Search Calls", "Get Document Calls",
        "Citation Precision (%)", "Citation Recall (%)", "Calibration Error (%)"]
    row = text.splitlines()[text.splitlines().index(header) + 2]
    assert [c.strip() for c in row.strip("│ ").split("│")] == [
        "25.00", "62.50", "66.67", "1.75", "0.25", "75.00", "75.00", "-"]
    assert "Calibration Error needs at least 100 judged answers, as BrowseComp-Plus' evaluator does (2 here)" in text


def test_without_the_browsecomp_plus_judge_accuracy_is_left_out_and_the_fix_named(tmp_path):
    write_verdicts(tmp_path, KNOWN_VERDICTS, preset="browsecomp")  # another prompt: not the leaderboard's
    summary = summary_of(known_tasks(), tmp_path)
    block = summary.to_json()["browsecomp_plus"]
    assert block["Accuracy (%)"] is None and block["Calibration Error (%)"] is None and block["judged"] == 0
    assert block["Recall (%)"] == 62.5
    assert ("Accuracy and Calibration Error need verdicts of the browsecomp_plus judge (this run has the browsecomp "
            "judge): rollout report judge results/bcp/bcp_bm25 --preset browsecomp_plus") in printed(summary)
    alone = summarize(known_tasks(), mode="m", gateway_file="g", wall_time_s=1.0).browsecomp_plus
    assert alone is not None and alone.accuracy is None and alone.judge_preset is None


def test_a_verdict_the_judge_could_not_read_counts_as_wrong_as_its_evaluator_counts_it(tmp_path):
    write_verdicts(tmp_path, {"1": (None, None), "2": (0.0, 0.3)})
    block = summary_of(known_tasks(), tmp_path).to_json()["browsecomp_plus"]
    assert (block["answered"], block["judged"], block["Accuracy (%)"]) == (2, 1, 0.0)


def test_a_run_on_other_data_has_no_block(tmp_path):
    demo = [answer_task(f"q{i}", [call("query_knowledge_base_dense", ["d1", "d2"], i)], "Kelmor",
                        {"gold_doc_ids": ["d1"], "hops": 1}) for i in range(3)]
    summary = summary_of(demo, tmp_path)
    assert summary.browsecomp_plus is None and "browsecomp_plus" not in summary.to_json()
    assert "BrowseComp-Plus" not in printed(summary)


def test_a_run_without_qrels_whose_agent_called_its_tools_has_the_block(tmp_path):
    tasks = [answer_task("1", [call("search", ["5"], 1)], "Exact Answer: x", {})]
    block = summary_of(tasks, tmp_path).to_json()["browsecomp_plus"]
    assert block["Recall (%)"] is None and block["Search Calls"] == 1.0


def test_bcp_both_counts_each_search_tool_apart(tmp_path):
    tasks = [
        answer_task("1", [call("search_bm25", ["1"], 1), call("search_bm25", ["2"], 2), call("search_dense", ["3"], 3),
                          call("get_document", ["3"], 4, docid="3")], "Exact Answer: x [3]",
                    {"evidence_doc_ids": ["1", "3", "4", "5"]}),
        answer_task("2", [call("search_dense", ["7"], 5)], "Exact Answer: y", {"evidence_doc_ids": ["7"]}),
    ]
    summary = summary_of(tasks, tmp_path)
    block = summary.to_json()["browsecomp_plus"]
    assert block["calls_per_query"] == {"get_document": 0.5, "search_bm25": 1.0, "search_dense": 1.0}
    assert block["Search Calls"] == 2.0 and block["Get Document Calls"] == 0.5
    assert block["Recall (%)"] == 75.0  # (2 of 4 + 1 of 1) / 2: both search tools' docids count
    text = printed(summary)
    header = next(line for line in text.splitlines() if "Accuracy (%)" in line)
    assert "Search Calls ┃ search_bm25 calls ┃ search_dense calls ┃ Get Document Calls" in header


def test_the_calibration_error_is_browsecomp_pluses_over_bins_of_100(tmp_path):
    # 100 answers at 50% of which 20 right, 100 at 90% of which 90 right. Sorted by confidence the first bin is the
    # 50% one; BrowseComp-Plus' calib_err leaves the last bin out of its sum, so the error is
    # sqrt(100/200 * (0.5 - 0.2)^2) = sqrt(0.045) = 0.2121 -> 21.21%.
    tasks, verdicts = [], {}
    for i in range(200):
        confidence, right = (50, i < 20) if i < 100 else (90, i < 190)
        tasks.append(answer_task(str(i), [call("search", ["1"], i)], f"Exact Answer: x\nConfidence: {confidence}%",
                                 {"evidence_doc_ids": ["1"]}))
        verdicts[str(i)] = (float(right), confidence / 100)
    write_verdicts(tmp_path, verdicts)
    block = summary_of(tasks, tmp_path).to_json()["browsecomp_plus"]
    assert block["Calibration Error (%)"] == round(100 * math.sqrt(0.5 * 0.3 ** 2), 2) == 21.21
    assert block["Accuracy (%)"] == 55.0  # 110 of 200
    assert block["with_citations"] == 0 and block["Citation Precision (%)"] is None


def test_the_calibration_error_breaks_tied_confidences_as_its_evaluator_does(tmp_path):
    # Judges give round percents: 100 answers at 80% straddle the cut between the bins of 100, the first 50 (in the
    # run's order) right and the last 50 wrong, so the order the sort leaves equal confidences in decides the figure.
    tasks, verdicts, confidences, correctness = [], {}, [], []
    for i in range(200):
        confidence = (50, 80, 80, 95)[i % 4]
        right = (i % 3 == 0, i < 100, i < 100, i % 5 != 0)[i % 4]
        qid = f"q{i:03d}"
        tasks.append(answer_task(qid, [call("search", ["1"], i)], f"Exact Answer: x\nConfidence: {confidence}%",
                                 {"evidence_doc_ids": ["1"]}))
        verdicts[qid] = (float(right), confidence / 100)  # as the judge's parser turns N% into a metric
        confidences.append(float(confidence))
        correctness.append(right)
    write_verdicts(tmp_path, verdicts)
    block = summary_of(tasks, tmp_path).to_json()["browsecomp_plus"]
    assert block["Calibration Error (%)"] == round(calculate_calibration_error(confidences, correctness), 2)


def test_an_answer_whose_judge_read_no_confidence_is_left_out_of_the_calibration_error(tmp_path):
    # Its evaluator counts such an answer as missing a confidence, even when the answer states one: here 50 right
    # answers stating 10%, which would fill half the first bin.
    tasks, verdicts, confidences, correctness = [], {}, [], []
    for i in range(250):
        read = i % 5 != 0
        confidence, right = (50, i % 3 == 0) if i < 125 else (90, i % 7 != 0)
        right = right or not read
        qid = f"q{i:03d}"
        tasks.append(answer_task(qid, [call("search", ["1"], i)], "Exact Answer: x\nConfidence: 10%",
                                 {"evidence_doc_ids": ["1"]}))
        verdicts[qid] = (float(right), confidence / 100 if read else None)
        if read:
            confidences.append(float(confidence))
            correctness.append(right)
    write_verdicts(tmp_path, verdicts)
    block = summary_of(tasks, tmp_path).to_json()["browsecomp_plus"]
    assert block["judged"] == 250 and len(confidences) == 200
    assert block["Calibration Error (%)"] == round(calculate_calibration_error(confidences, correctness), 2)


@pytest.mark.parametrize(("text", "cited"), [
    ("Kelmor [12].", ["12"]),
    ("see [12, 34] and [56][12]", ["12", "34", "56"]),
    ("【7】 and 【8, 9】", ["7", "8", "9"]),
    ("in [2024] per [doc-5]", ["2024", "5"]),  # its evaluator reads any run of digits in brackets
    ("[abc] and 123 and (45)", []),
    ("", []),
])
def test_citations_are_read_as_browsecomp_pluses_evaluator_reads_them(text, cited):
    assert cited_docids(text) == cited


def test_the_response_is_what_the_browsecomp_plus_judge_reads_and_the_status_what_kept_it_from_completing():
    tasks = known_tasks()
    assert [final_response(t) == judged_text(t, BROWSECOMP_PLUS) for t in tasks] == [True] * 5
    bare = TaskResult.answered(Question("x", "?", ["a"]), prediction="just this", turns=1, messages=[], usage={},
                               calls=[], events=[], worker_id="w", latency_s=0.0)
    assert final_response(bare) == judged_text(bare, BROWSECOMP_PLUS) == "just this"
    assert [run_status(t) for t in tasks] == [
        "completed", "completed", "incomplete: out of turns (agent.max_turns)", "infra_error: the gateway timed out",
        "incomplete: answer cut at the model's token limit"]


def test_the_summary_file_keeps_the_block_and_reads_it_back(tmp_path):
    run = write_run(tmp_path / "bcp_bm25", known_tasks(), verdicts=KNOWN_VERDICTS)
    rescore(run)
    written = json.loads((run / "evaluation_summary.json").read_text())["browsecomp_plus"]
    assert written["Accuracy (%)"] == 25.0 and written["Recall (%)"] == 62.5
    back = read_summary(run)
    assert back is not None and back.browsecomp_plus is not None
    assert back.browsecomp_plus.to_json() == written


def test_compare_shows_the_runs_numbers_side_by_side(tmp_path):
    bm25 = write_run(tmp_path / "bcp_bm25", known_tasks(), verdicts=KNOWN_VERDICTS)
    both = [answer_task("1", [call("search_bm25", ["100"], 1), call("search_dense", ["101", "102"], 2)],
                        FINAL_BOTH, {"evidence_doc_ids": ["100", "101", "102", "103"], "gold_doc_ids": ["101"]}),
            answer_task("2", [call("search_dense", ["111"], 3)], "Exact Answer: Dravia\nConfidence: 60%",
                        {"evidence_doc_ids": ["110", "111"], "gold_doc_ids": ["111"]})]
    write_run(tmp_path / "bcp_both", both, mode="bcp_both", verdicts={"1": (1.0, 0.9), "2": (1.0, 0.6)})
    demo = write_run(tmp_path / "sparse", [answer_task("1", [call("query_knowledge_base_sparse", ["d"], 1)], "x",
                                                       {"gold_doc_ids": ["d"]})], mode="sparse")
    c = compare_runs([bm25, tmp_path / "bcp_both", demo])
    table = next(t for t in comparison_tables(c) if t[0] == "BrowseComp-Plus leaderboard numbers")
    _, headers, rows = table
    assert headers == ["mode", "queries", "answered", "judged", "Accuracy (%)", "Recall (%)", "Gold Recall (%)",
                       "Search Calls", "search_bm25 calls", "search_dense calls", "Get Document Calls",
                       "Citation Precision (%)", "Citation Recall (%)", "Calibration Error (%)"]
    # bcp_both: accuracy 2 of 2; evidence 3 of 4 and 1 of 2 -> 62.5; gold 1 of 1 and 1 of 1; searches 2 and 1;
    # answer 1 cites 100 and 104: precision 1/2, recall 1/4.
    assert rows == [
        ["bcp_bm25", "4", "2", "2", "25.00", "62.50", "66.67", "1.75", "0.00", "0.00", "0.25", "75.00", "75.00", "-"],
        ["bcp_both", "2", "2", "2", "100.00", "62.50", "100.00", "1.50", "0.50", "1.00", "0.00", "50.00", "25.00",
         "-"],
    ]
    runs = {r["label"]: r for r in comparison_json(c)["runs"]}
    assert runs["bcp_both"]["browsecomp_plus"]["Accuracy (%)"] == 100.0 and runs["sparse"]["browsecomp_plus"] is None
    written = write_comparison(c, tmp_path / "out")
    with next(p for p in written if p.suffix == ".csv").open() as f:
        by_label = {r["label"]: r for r in csv.DictReader(f)}
    assert by_label["bcp_bm25"]["browsecomp_plus.Accuracy (%)"] == "25.0"
    assert by_label["sparse"]["browsecomp_plus.Accuracy (%)"] == ""


FINAL_BOTH = "Explanation: found it [100] and [104].\nExact Answer: Kelmor\nConfidence: 90%"


def test_compare_without_browsecomp_plus_runs_has_no_such_table(tmp_path):
    demo = write_run(tmp_path / "sparse", [answer_task("1", [call("query_knowledge_base_sparse", ["d"], 1)], "x",
                                                       {"gold_doc_ids": ["d"]})], mode="sparse")
    assert all(t[0] != "BrowseComp-Plus leaderboard numbers" for t in comparison_tables(compare_runs([demo])))
