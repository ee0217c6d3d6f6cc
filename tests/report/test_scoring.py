"""`rollout.report.scoring.summarize`: failed tasks counted apart, the inclusion switch, repeats, pass@k."""

from __future__ import annotations

import pytest
from rich.console import Console

from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.metrics import contains_answer, exact_match, f1_score, normalize_answer, pass_at_k, retrieval_recall
from rollout.report.printed import print_summary
from rollout.report.scoring import summarize, t_interval


def task(qid: str, right: bool, *, status: str = "ok", repeat: int = 0, gold_docs=("d1",), found=("d1",),
         found_docs=()) -> TaskResult:
    """Task `qid` whose gold answer is "Paris"; its one tool call returned `found` (chunks of `found_docs`)."""
    call = ToolCallRecord(
        call_id=f"{qid}-{repeat}", name="query_knowledge_base_dense", arguments={"query": qid},
        ok=status != "infra_error", outcome="ok" if status != "infra_error" else "transport_error", error=None,
        started=0.0, latency_ms=1.0, result_ids=list(found), result_doc_ids=list(found_docs), reached_gateway=True,
    )
    question = Question(qid, f"where {qid}", ["Paris"], {"gold_doc_ids": list(gold_docs)})
    prediction = "Paris" if right else "Lyon"
    if status == "ok":
        return TaskResult.answered(question, prediction=prediction, turns=2, messages=[], usage={}, calls=[call],
                                   events=[], worker_id="w0", latency_s=0.1, repeat=repeat)
    return TaskResult.failed(question, status=status, error=f"{status} happened", prediction=prediction, turns=2,
                             calls=[call], worker_id="w0", latency_s=0.1, repeat=repeat)


def summary(tasks, **kwargs) -> dict:
    """The summary as evaluation_summary.json holds it."""
    return summarize(tasks, mode="dense", gateway_file="g.json", wall_time_s=1.0, **kwargs).to_json()


def test_failed_tasks_are_counted_and_left_out_of_the_metrics():
    # The infra_error task "answered" right: it must not count as right, nor as wrong.
    tasks = [task("q1", True), task("q2", False), task("q3", True, status="infra_error"),
             task("q4", False, status="error", found=()), task("q5", False, status="timeout", found=())]
    s = summary(tasks)
    assert s["n"] == 5 and s["scored"] == 2
    assert s["statuses"] == {"ok": 2, "error": 1, "timeout": 1, "infra_error": 1}
    assert (s["errors"], s["timeouts"]) == (1, 1)
    assert s["metrics"] == {"exact_match": 0.5, "f1": 0.5, "contains_answer": 0.5, "retrieval_recall": 1.0}
    assert s["score_failed"] is False and s["repeats"] == 1 and s["deterministic_agent"] is None
    assert "ci95" not in s and "pass_at_k" not in s
    assert s["tool_calls"] == {"query_knowledge_base_dense": {"calls": 5, "failed": 1}}  # every task's calls


def test_score_failed_counts_failed_tasks_as_wrong_answers():
    tasks = [task("q1", True), task("q2", False), task("q3", True, status="infra_error"),
             task("q4", False, status="error", found=())]
    s = summary(tasks, score_failed=True, deterministic_agent=True)
    assert s["n"] == 4 and s["scored"] == 4 and s["score_failed"] is True
    assert s["metrics"]["exact_match"] == 0.25  # the infra_error task's right prediction counts as wrong
    assert s["metrics"]["retrieval_recall"] == 0.75  # what the calls returned still counts
    assert s["deterministic_agent"] is True


def test_recall_counts_gold_documents_found_through_their_chunks():
    # A chunked corpus: the call returned passages "d1#0" and "d9#2", chunks of documents d1 and d9; gold names d1, d2.
    s = summary([task("q1", True, gold_docs=("d1", "d2"), found=("d1#0", "d9#2"), found_docs=("d1", "d9"))])
    assert s["metrics"]["retrieval_recall"] == 0.5


def test_answer_metrics_follow_squads_definitions():
    # Articles are dropped as words (a, an, the), never inside one; so is punctuation; case and spacing do not count.
    assert normalize_answer("A  Tale of the Anthem, an Ode!") == "tale of anthem ode"
    assert exact_match("a Paris.", ["Paris"]) == 1.0 and exact_match("Paris, France", ["Paris"]) == 0.0
    # Token F1: "new york" shares 2 tokens with the 3 of "new york city": precision 1, recall 2/3, F1 0.8.
    assert f1_score("New York", ["Paris", "New York City"]) == pytest.approx(0.8)
    assert f1_score("Lyon", ["Paris"]) == 0.0
    # Contains-answer matches whole words only.
    assert contains_answer("It is 42, I think", ["42"]) == 1.0 and contains_answer("It is 420", ["42"]) == 0.0
    assert retrieval_recall(["d1", "d3"], ["d1", "d2"]) == 0.5 and retrieval_recall(["d1"], []) is None


def test_pass_at_k_is_the_unbiased_estimator():
    # 1 - C(n-c, k) / C(n, k)
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0


def test_nothing_scored_gives_empty_metrics():
    s = summary([task("q1", True, status="infra_error")])
    assert s["n"] == 1 and s["scored"] == 0 and s["metrics"]["exact_match"] is None
    assert summary([])["metrics"] == dict.fromkeys(("exact_match", "f1", "contains_answer", "retrieval_recall"))


def three_repeats() -> list[TaskResult]:
    """q1 right in 1 of 3 repeats, q2 right in all 3, q3 in none; q4's repeat 2 hit the infrastructure.
    EM per repeat: r0 3/4 (q1,q2,q4), r1 2/4 (q2,q4), r2 1/3 (q2)."""
    right = {"q1": (True, False, False), "q2": (True, True, True), "q3": (False, False, False), "q4": (True, True, None)}
    return [
        task(q, bool(ok), repeat=r, status="infra_error" if ok is None else "ok")
        for r in range(3) for q, oks in right.items() for ok in [oks[r]]
    ]


def test_repeats_give_a_t_interval_over_repeat_means_and_pass_at_k():
    s = summary(three_repeats())
    assert s["repeats"] == 3 and s["n"] == 12 and s["scored"] == 11
    assert s["metrics"]["exact_match"] == round(6 / 11, 4)  # mean over all scored records
    assert {k: v["exact_match"] for k, v in s["by_repeat"].items()} == {"0": 0.75, "1": 0.5, "2": round(1 / 3, 4)}
    low, high = s["ci95"]["exact_match"]
    # mean 0.5278, sd 0.2097 over 3 repeats, t(0.975, 2) = 4.303: half-width 0.521, clipped at 1.
    assert low == pytest.approx(0.5278 - 0.5209, abs=1e-3) and high == 1.0
    assert s["ci95"]["retrieval_recall"] == [1.0, 1.0]  # every repeat found every gold passage
    # pass@1 = mean of c/n = (1/3 + 1 + 0 + 2/2) / 4; pass@2: q1 1 - C(2,2)/C(3,2) = 2/3, q4 has n = 2, c = 2: 1.
    assert s["pass_at_k"]["1"] == pytest.approx((1 / 3 + 1 + 0 + 1) / 4, abs=1e-4)
    assert s["pass_at_k"]["2"] == pytest.approx((2 / 3 + 1 + 0 + 1) / 4, abs=1e-4)
    assert s["pass_at_k"]["3"] == pytest.approx((1 + 1 + 0) / 3, abs=1e-4)  # q4 has only 2 scored records


def test_one_question_right_in_one_of_three_repeats():
    s = summary([task("q1", r == 0, repeat=r) for r in range(3)])
    assert s["pass_at_k"] == {"1": pytest.approx(1 / 3, abs=1e-4), "2": pytest.approx(2 / 3, abs=1e-4), "3": 1.0}


def test_t_interval():
    assert t_interval([0.5]) is None
    assert t_interval([0.4, 0.4, 0.4]) == pytest.approx((0.4, 0.4))
    low, high = t_interval([0.0, 1.0])  # mean 0.5, sd 0.707, t(0.975, 1) = 12.706
    assert (low, high) == pytest.approx((0.5 - 6.353, 0.5 + 6.353), abs=1e-3)


def test_the_printed_table_has_an_infra_column_and_the_repeats_line():
    console = Console(record=True, width=200)
    tasks = [*three_repeats(), task("q9", False, status="timeout", repeat=0)]
    print_summary(summarize(tasks, mode="dense", gateway_file="g.json", wall_time_s=1.0), "out", console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "EM" in line and "infra" in line)
    row = text.splitlines()[text.splitlines().index(header) + 2]
    assert row.replace("│", " ").split()[4:7] == ["0", "1", "1"]  # errors, timeouts, infra
    assert "13 tasks, 11 scored" in text
    assert "3 repeats · EM 95% CI [" in text and "pass@3 0.667" in text
