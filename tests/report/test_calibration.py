"""`rollout.report.calibration`: stated confidences parsed, and the calibration error on numbers known by hand."""

from __future__ import annotations

import pytest
from rich.console import Console

from rollout.records import Question, TaskResult
from rollout.report.calibration import browsecomp_plus_error, parse_confidence, stated_confidence
from rollout.report.extra_scores import read_scores, write_scores
from rollout.report.printed import print_summary
from rollout.report.scoring import summarize
from tests.report.browsecomp_plus_evaluator import calculate_calibration_error


@pytest.mark.parametrize("text, confidence", [
    ("Explanation: ...\nExact Answer: Kremes Works\nConfidence: 85%", 0.85),
    ("**Confidence:** 85 %", 0.85),
    ("**Confidence**: 70", 0.70),
    ("confidence: 0.85", 0.85),
    ("Confidence: 1", 0.01),
    ("Confidence: 1.0", 1.0),
    ("Confidence: 150%", 1.0),
    ("I have some confidence: 20%\nConfidence: 60%", 0.60),
    ("Exact Answer: Paris", None),
])
def test_a_stated_confidence_is_read_as_documented(text, confidence):
    assert parse_confidence(text) == pytest.approx(confidence) if confidence is not None else parse_confidence(text) is None


def test_the_confidence_comes_from_the_last_assistant_message_else_the_prediction():
    messages = [{"role": "assistant", "content": "Confidence: 10%"}, {"role": "tool", "content": "Confidence: 30%"},
                {"role": "assistant", "content": [{"type": "text", "text": "Exact Answer: x\nConfidence: 90%"}]}]
    assert stated_confidence(messages, "Confidence: 50%") == pytest.approx(0.9)
    assert stated_confidence([{"role": "assistant", "content": "x"}], "Paris. Confidence: 50%") == pytest.approx(0.5)


def answer(i: int, right: bool, confidence: int) -> TaskResult:
    question = Question(f"q{i}", "which?", ["Paris"], {})
    final = f"Explanation: ...\nExact Answer: {'Paris' if right else 'Lyon'}\nConfidence: {confidence}%"
    return TaskResult.answered(question, prediction="Paris" if right else "Lyon", turns=1,
                               messages=[{"role": "user", "content": "which?"}, {"role": "assistant", "content": final}],
                               usage={}, calls=[], events=[], worker_id="w0", latency_s=0.1)


# 4 answers at 90% of which 2 right, 2 at 10% of which none: bins 0.9-1.0 (conf 0.9, accuracy 0.5) and 0.1-0.2
# (conf 0.1, accuracy 0); error = 4/6 * |0.9 - 0.5| + 2/6 * |0.1 - 0| = 0.26667 + 0.03333 = 0.3.
KNOWN = [(True, 90), (True, 90), (False, 90), (False, 90), (False, 10), (False, 10)]


def test_the_calibration_error_of_known_numbers():
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(KNOWN)], mode="m", gateway_file="g", wall_time_s=1.0)
    cal = s.to_json()["calibration"]
    assert cal["n"] == 6 and cal["error"] == pytest.approx(0.3) and cal["correct_by"] == "exact_match"
    assert cal["confidence"] == pytest.approx(0.6333) and cal["accuracy"] == pytest.approx(0.3333)
    assert [(b["low"], b["n"], b["confidence"], b["accuracy"]) for b in cal["bins"]] == [
        (0.1, 2, 0.1, 0.0), (0.9, 4, 0.9, 0.5)]


def test_a_judge_decides_correctness_when_a_scores_file_has_judge_correct(tmp_path):
    # The judge finds the two "Lyon" answers at 90% right too: bin 0.9 is then all right, error 4/6*0.1 + 2/6*0.1.
    write_scores(tmp_path, "judge", [{"id": f"q{i}", "repeat": 0, "metrics": {"judge_correct": float(c == 90)}}
                                     for i, (_, c) in enumerate(KNOWN)])
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(KNOWN)], mode="m", gateway_file="g", wall_time_s=1.0,
                  extra=read_scores(tmp_path))
    assert s.calibration is not None
    assert (s.calibration.correct_by, s.calibration.error) == ("judge_correct", pytest.approx(0.1))


def test_a_run_whose_answers_state_no_confidence_has_no_calibration():
    question = Question("q1", "which?", ["Paris"], {})
    plain = TaskResult.answered(question, prediction="Paris", turns=1, messages=[], usage={}, calls=[], events=[],
                                worker_id="w0", latency_s=0.1)
    s = summarize([plain], mode="m", gateway_file="g", wall_time_s=1.0)
    assert s.calibration is None and "calibration" not in s.to_json()


def test_the_printed_summary_says_the_calibration_and_what_decided_correctness():
    console = Console(record=True, width=200)
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(KNOWN)], mode="m", gateway_file="g", wall_time_s=1.0)
    print_summary(s, "out", console)
    assert "Calibration (exact_match): error 0.300 over 6 answers stating a confidence" in console.export_text()


def test_browsecomp_plus_calibration_error_of_known_numbers():
    # 300 answers: 100 at 20% of which 20 right, 100 at 50% of which 30 right, 100 at 90% of which 10 right. Sorted by
    # confidence, bins of 100; BrowseComp-Plus sums every bin but the last: sqrt(100/300 * 0^2 + 100/300 * 0.2^2).
    known = [(i < 20, 20) for i in range(100)] + [(i < 30, 50) for i in range(100)] + [(i < 10, 90) for i in range(100)]
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(known)], mode="m", gateway_file="g", wall_time_s=1.0)
    assert s.calibration is not None and s.calibration.n == 300
    assert s.calibration.browsecomp_plus_error == pytest.approx((100 / 300 * 0.2 ** 2) ** 0.5, abs=1e-4)
    # Under 100 answers BrowseComp-Plus computes none.
    few = summarize([answer(i, r, c) for i, (r, c) in enumerate(KNOWN)], mode="m", gateway_file="g", wall_time_s=1.0)
    assert few.calibration is not None and few.calibration.browsecomp_plus_error is None


def test_a_browsecomp_judges_reading_of_the_confidence_wins_over_the_parsed_one(tmp_path):
    # The judge read 50% where the message says 90% (and 10%): every answer is then in the 0.5 bin, 2 of 6 right.
    write_scores(tmp_path, "judge", [{"id": f"q{i}", "repeat": 0, "metrics": {"confidence": 0.5}}
                                     for i in range(len(KNOWN))])
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(KNOWN)], mode="m", gateway_file="g", wall_time_s=1.0,
                  extra=read_scores(tmp_path))
    assert s.calibration is not None and [b.low for b in s.calibration.bins] == [0.5]
    assert s.calibration.error == pytest.approx(0.5 - 2 / 6, abs=1e-4)


def tied_answers() -> list[tuple[bool, int]]:
    """200 (right, confidence) with round percents, as judges give them: 100 answers at 80% straddle the cut between
    the two bins of 100, the first 50 of them (in order) right and the last 50 wrong, so how the sort orders equal
    confidences decides the first bin's accuracy."""
    return [((i % 3 == 0, i < 100, i < 100, i % 5 != 0)[i % 4], (50, 80, 80, 95)[i % 4]) for i in range(200)]


def test_browsecomp_plus_calibration_error_breaks_ties_as_its_evaluator_does():
    known = tied_answers()
    theirs = calculate_calibration_error([c for _, c in known], [r for r, _ in known])
    assert 100 * browsecomp_plus_error([c / 100 for _, c in known], [float(r) for r, _ in known]) == \
        pytest.approx(theirs, rel=1e-12)
    s = summarize([answer(i, r, c) for i, (r, c) in enumerate(known)], mode="m", gateway_file="g", wall_time_s=1.0)
    assert s.calibration is not None and s.calibration.browsecomp_plus_error == round(theirs / 100, 4)
