"""Copies of texttron/BrowseComp-Plus' evaluator functions rollout's numbers are checked against.

Copied from `scripts_evaluation/evaluate_run.py` (commit 97c637c): `parse_judge_response`, `calib_err` (its
p="2" path, the one `calculate_calibration_error` takes) and `calculate_calibration_error`, line for line but for
the parts named.
"""

from __future__ import annotations

import re

import numpy as np


def parse_judge_response(judge_response: str) -> dict:
    # Its extracted_final_answer, correct and confidence (its `reasoning`, which it reports and never scores, is left
    # out).
    result = {"extracted_final_answer": None, "correct": None, "confidence": None, "parse_error": False}
    if not judge_response:
        result["parse_error"] = True
        return result
    answer_match = re.search(
        r"\*\*extracted_final_answer:\*\*\s*(.*?)(?=\n|$)", judge_response, re.IGNORECASE | re.DOTALL)
    if not answer_match:
        answer_match = re.search(
            r"\*\*extracted_final_answer\*\*:\s*(.*?)(?=\n|$)", judge_response, re.IGNORECASE | re.DOTALL)
    if not answer_match:
        answer_match = re.search(r"extracted_final_answer:\s*(.*?)(?=\n|$)", judge_response, re.IGNORECASE | re.DOTALL)
    if answer_match:
        result["extracted_final_answer"] = answer_match.group(1).strip()
    correct_match = re.search(r"\*\*correct:\*\*\s*(yes|no)", judge_response, re.IGNORECASE)
    if not correct_match:
        correct_match = re.search(r"\*\*correct\*\*:\s*(yes|no)", judge_response, re.IGNORECASE)
    if not correct_match:
        correct_match = re.search(r"correct:\s*(yes|no)", judge_response, re.IGNORECASE)
    if correct_match:
        result["correct"] = correct_match.group(1).lower() == "yes"
    confidence_match = re.search(r"\*\*confidence:\*\*\s*(\d+(?:\.\d+)?)\s*%?", judge_response, re.IGNORECASE)
    if not confidence_match:
        confidence_match = re.search(r"\*\*confidence\*\*:\s*(\d+(?:\.\d+)?)\s*%?", judge_response, re.IGNORECASE)
    if not confidence_match:
        confidence_match = re.search(r"confidence:\s*(\d+(?:\.\d+)?)\s*%?", judge_response, re.IGNORECASE)
    if confidence_match:
        result["confidence"] = float(confidence_match.group(1))
        if result["confidence"] > 100:
            result["confidence"] = 100
    if result["correct"] is None:
        result["parse_error"] = True
    return result


# source: https://github.com/hendrycks/outlier-exposure/blob/master/utils/calibration_tools.py
def calib_err(confidence, correct, p="2", beta=100):
    # beta is target bin size
    idxs = np.argsort(confidence)
    confidence = confidence[idxs]
    correct = correct[idxs]
    bins = [[i * beta, (i + 1) * beta] for i in range(len(confidence) // beta)]
    bins[-1] = [bins[-1][0], len(confidence)]

    cerr = 0
    total_examples = len(confidence)
    for i in range(len(bins) - 1):
        bin_confidence = confidence[bins[i][0] : bins[i][1]]
        bin_correct = correct[bins[i][0] : bins[i][1]]
        num_examples_in_bin = len(bin_confidence)

        if num_examples_in_bin > 0:
            difference = np.abs(np.nanmean(bin_confidence) - np.nanmean(bin_correct))
            cerr += num_examples_in_bin / total_examples * np.square(difference)

    return np.sqrt(cerr)


def calculate_calibration_error(confidences: list[float], correctness: list[bool], beta: int = 100) -> float:
    assert len(confidences) == len(correctness)
    assert len(confidences) > 0

    confidence = np.array(confidences) / 100.0
    correct = np.array(correctness, dtype=float)

    calibration_error = calib_err(confidence, correct, p="2", beta=beta)

    return calibration_error * 100
