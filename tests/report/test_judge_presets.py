"""The grader prompts are the published ones, byte for byte, and each reply format is read as its source means it."""

from __future__ import annotations

import hashlib

import pytest

from rollout.errors import ConfigError
from rollout.report.judge.presets import (
    PRESETS,
    get_preset,
    parse_browsecomp,
    parse_browsecomp_plus,
    parse_simpleqa,
)
from tests.report.browsecomp_plus_evaluator import parse_judge_response

PUBLISHED_SHA256 = {
    # sha256 of GRADER_TEMPLATE.strip() in openai/simple-evals@ee3b031 and texttron/BrowseComp-Plus@97c637c
    "simpleqa": "063c04ea798f91c4706c050b66a721afc77a458b12d8f0d72286d4b0eee8a3ee",
    "browsecomp": "0f0023ee579b8c134f1834ed8952778b9e01460e31d47c242ee3629da9d44835",
    "browsecomp_plus": "71fb29f51a56cea9fe647331d525648474195fa4816f7d05632459d572419d90",
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_template_is_the_published_text(name):
    assert hashlib.sha256(PRESETS[name].template.encode()).hexdigest() == PUBLISHED_SHA256[name]


def test_the_prompt_is_filled_as_its_source_fills_it():
    system, user = PRESETS["simpleqa"].messages("Who?", "Ann | A. Lee", "Ann Lee")
    assert system == {"role": "system", "content": "You are a helpful assistant."}
    assert "Question: Who?\nGold target: Ann | A. Lee\nPredicted answer: Ann Lee\n```" in user["content"]
    (only,) = PRESETS["browsecomp_plus"].messages("Who?", "Ann", "It is Ann.")
    assert "[response]: It is Ann.\n\n[correct_answer]: Ann\n\n" in only["content"]
    assert "0|\\%| and 100|\\%|" in only["content"]  # the source's escapes, as its Python string holds them


@pytest.mark.parametrize("reply, label", [
    ("A", "CORRECT"), (" B\n", "INCORRECT"), ('"C"', "NOT_ATTEMPTED"), ("INCORRECT", "INCORRECT"),
    ("The grade is NOT ATTEMPTED.", "NOT_ATTEMPTED"), ("Grade: A", "CORRECT"), ("", None), ("maybe?", None),
])
def test_simpleqa_replies(reply, label):
    verdict = parse_simpleqa(reply)
    assert verdict.label == label
    if label is None:
        assert verdict.metrics == {"judge_correct": None, "not_attempted": None}
    else:
        assert verdict.metrics == {"judge_correct": float(label == "CORRECT"),
                                   "not_attempted": float(label == "NOT_ATTEMPTED")}


@pytest.mark.parametrize("reply, label", [
    ("A: CORRECT | B: INCORRECT", None), ("CORRECT ... INCORRECT", None), ("A ... B", None),
    ("A: CORRECT\nB: INCORRECT\nC: NOT_ATTEMPTED", None), ("NOT ATTEMPTED, or INCORRECT", None),
    ("A: CORRECT", "CORRECT"), ("CORRECT. The answer is CORRECT.", "CORRECT"), ("A, A", "CORRECT"),
])
def test_a_simpleqa_reply_naming_more_than_one_grade_is_unparsed(reply, label):
    assert parse_simpleqa(reply).label == label


def test_a_browsecomp_reply_saying_yes_and_no_is_unparsed():
    verdict = parse_browsecomp("extracted_final_answer: Ann\ncorrect: yes\ncorrect: no\nconfidence: 90%")
    assert not verdict.parsed and verdict.metrics == {"judge_correct": None, "confidence": None}
    assert parse_browsecomp("correct: yes\n**correct:** Yes").label == "yes"


@pytest.mark.parametrize("reply, correct, confidence, extracted", [
    ("extracted_final_answer: Ann\n\nreasoning: same.\n\ncorrect: yes\n\nconfidence: 85%", 1.0, 0.85, "Ann"),
    ("**extracted_final_answer:** Bob\n**reasoning:** differs\n**correct:** No\n**confidence**: 130", 0.0, 1.0, "Bob"),
    ("extracted_final_answer: None\nreasoning: no answer. It is incorrect.\ncorrect: no", 0.0, None, "None"),
])
def test_browsecomp_replies(reply, correct, confidence, extracted):
    verdict = parse_browsecomp(reply)
    assert verdict.metrics == {"judge_correct": correct, "confidence": confidence}
    assert verdict.extracted_answer == extracted


def test_a_browsecomp_reply_without_its_verdict_is_unparsed_not_wrong():
    verdict = parse_browsecomp("extracted_final_answer: Ann\nreasoning: it is incorrect")
    assert not verdict.parsed and verdict.metrics == {"judge_correct": None, "confidence": None}


def test_an_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="simpleqa, browsecomp, browsecomp_plus"):
        get_preset("mmlu")


BROWSECOMP_PLUS_REPLIES = [
    "extracted_final_answer: Ann\n\nreasoning: same.\n\ncorrect: yes\n\nconfidence: 85%",
    "**extracted_final_answer:** Bob\n**reasoning:** differs\n**correct:** No\n**confidence**: 130",
    "extracted_final_answer: None\nreasoning: no answer. It is incorrect.\ncorrect: no",
    # Two verdicts: the first counts there; a bold one before any plain one.
    "extracted_final_answer: Ann\ncorrect: yes\ncorrect: no\nconfidence: 90%",
    "correct: no\n**correct:** yes\nconfidence: 40\n**Confidence**: 70%",
    # Shapes it does not read: a space before the colon, a bold value.
    "extracted_final_answer: Ann\nCorrect : yes\nconfidence: 90%",
    "extracted_final_answer: Ann\ncorrect: **yes**\nconfidence: 90%",
    "extracted_final_answer: Ann\ncorrect: yes\nConfidence : 90%\nconfidence: **80%**",
    "extracted_final_answer: Ann\ncorrect: yes\nconfidence: **80%**",
    # What its patterns read besides: `correct:` inside a word, `yes` starting one, an answer on the next line.
    "extracted_final_answer: Ann\nreasoning: the answer is incorrect: no match.\ncorrect: yes",
    "extracted_final_answer:\n  Ann Lee  \ncorrect: Yesterday's answer\nconfidence: 12.5 %",
    "EXTRACTED_FINAL_ANSWER: Ann\nCORRECT: YES\nCONFIDENCE: 100",
    "extracted_final_answer: Ann\nreasoning: it is incorrect",
    "",
]


@pytest.mark.parametrize("reply", BROWSECOMP_PLUS_REPLIES)
def test_the_browsecomp_plus_judge_reads_a_reply_as_its_evaluator_does(reply):
    theirs = parse_judge_response(reply)
    verdict = parse_browsecomp_plus(reply)
    assert PRESETS["browsecomp_plus"].parse is parse_browsecomp_plus
    if theirs["parse_error"]:  # no verdict there: never an answer judged right (a wrong one in its Accuracy)
        assert not verdict.parsed and verdict.metrics == {"judge_correct": None, "confidence": None}
        return
    confidence = theirs["confidence"]
    assert verdict.label == ("yes" if theirs["correct"] else "no")
    assert verdict.metrics == {"judge_correct": float(theirs["correct"]),
                               "confidence": None if confidence is None else confidence / 100.0}
    assert verdict.extracted_answer == theirs["extracted_final_answer"]


def test_the_browsecomp_preset_keeps_its_own_reading():
    assert PRESETS["browsecomp"].parse is parse_browsecomp
    assert parse_browsecomp("Correct : yes").label == "yes" and parse_browsecomp("correct: **yes**").label == "yes"
    assert not parse_browsecomp("correct: yes\ncorrect: no").parsed
