"""The default output folder names the question set: own-data runs over different question files never share
`results/<experiment>`, the demo keeps `results/demo/<mode>`, and a sweep still gives one folder per job."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.identity_keys import question_set_name
from rollout.run.config import compose_run_config

FILES = ("dataset=files", "dataset.corpus.path=/data/docs")


def test_an_own_data_run_is_filed_under_its_question_file():
    cfg = compose_run_config(*FILES, "dataset.questions.path=/data/qa/dev_set.jsonl", "mode=sparse")
    assert cfg.experiment == "dev_set" and cfg.output_dir.parts[:2] == ("results", "dev_set")
    assert cfg.output_dir.name.startswith("sparse")
    other = compose_run_config(*FILES, "dataset.questions.path=/data/qa/test.parquet", "mode=sparse")
    assert other.output_dir.parent == Path("results/test")


def test_two_question_files_of_one_name_still_get_two_folders():
    a, b = (compose_run_config(*FILES, f"dataset.questions.path=/data/{d}/test.jsonl").output_dir for d in "ab")
    assert a != b and a.parent == b.parent == Path("results/test")


def test_the_demo_and_named_datasets_keep_their_folders_and_a_name_set_by_hand_wins():
    assert compose_run_config("mode=dense").output_dir == Path("results/demo/dense")
    named = compose_run_config(*FILES, "dataset.questions.path=/data/qa.jsonl", "dataset.name=mine")
    assert named.output_dir.parent == Path("results/mine")


@pytest.mark.parametrize(("path", "hf_name", "hf_config", "name"), [
    ("/data/qa.jsonl", None, None, "qa"),
    ("/data/qa.jsonl.gz", None, None, "qa"),
    ("/data/saved_questions/", None, None, "saved_questions"),
    ("/data/my questions.json", None, None, "my_questions"),
    (None, "RUC-NLPIR/FlashRAG_datasets", "nq", "FlashRAG_datasets-nq"),
    (None, None, None, "custom"),
])
def test_question_set_names_are_folder_safe(path, hf_name, hf_config, name):
    assert question_set_name(path, hf_name=hf_name, hf_config=hf_config) == name
