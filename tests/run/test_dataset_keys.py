"""A `dataset.*` setting the chosen dataset does not read is refused before anything starts, naming `dataset=files`."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rollout.data.dataset import check_dataset_keys, dataset_preset, unread_dataset_override
from rollout.errors import ConfigError
from rollout.paths import CONF_DIR
from rollout.run.config import compose_run_config
from tests.run.test_exit_status import python_m_rollout


@pytest.mark.parametrize("override", ["+dataset.corpus.path=/data/notes", "+dataset.questions.path=/data/qa.jsonl"])
def test_an_added_corpus_or_question_path_on_the_demo_names_dataset_files(override: str):
    with pytest.raises(ConfigError, match="not read by the built-in knowledge base.*choose dataset=files") as e:
        compose_run_config(override)
    assert "\n" not in str(e.value) and override[1:].partition("=")[0] in str(e.value)


def test_a_generator_setting_on_a_files_dataset_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="dataset.n_passages is not read by a dataset of files"):
        compose_run_config("dataset=files", f"dataset.corpus.path={tmp_path}", f"dataset.questions.path={tmp_path}",
                           "+dataset.n_passages=10")


def test_the_settings_each_kind_reads_pass():
    check_dataset_keys({"name": "demo", "kind": "demo", "n_passages": 5, "n_questions": 5, "seed": 0, "limit": 2})
    check_dataset_keys({"name": "x", "kind": "files", "corpus": {"path": "c"}, "questions": {"path": "q"}, "limit": 1})
    check_dataset_keys({"name": "demo", "kind": "demo", "corpus": {"path": None}})  # null sets nothing


def test_without_plus_the_same_rule_answers_instead_of_hydras_hint():
    problem = unread_dataset_override(["mode=sparse", "dataset.corpus.path=/data/notes"])
    assert problem is not None and "dataset=files" in problem and "+dataset" not in problem
    assert unread_dataset_override(["dataset=files", "dataset.corpus.path=/data/notes"]) is None
    assert unread_dataset_override(["dataset.limit=3"]) is None


@pytest.mark.parametrize("override", ["dataset.corpus.path=/data/notes", "+dataset.corpus.path=/data/notes"])
def test_the_command_exits_2_with_one_line_before_starting_anything(tmp_path, override: str):
    # As a user types it, in a process of its own (the command configures the process's logging).
    done = python_m_rollout("mode=sparse", override, f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "dataset=files" in done.stderr and "Traceback" not in done.stderr
    assert "+dataset.corpus.path" not in done.stderr and "Started Ray" not in done.stderr
    assert not (tmp_path / "out" / "trajectory.jsonl").exists()


@pytest.mark.parametrize("override, key, valid, listed", [
    ("+dataset.corpus.colums.text=body", "dataset.corpus.colums", "dataset.corpus.columns", "chunk_tokens"),
    ("+dataset.corpus.pth=/data/notes", "dataset.corpus.pth", "dataset.corpus.path", "extensions"),
    ("+dataset.questions.skip_bad=true", "dataset.questions.skip_bad", "dataset.questions.skip_bad_lines", "split"),
])
def test_a_misspelled_corpus_or_question_key_names_the_key_and_the_valid_ones(tmp_path, override, key, valid, listed):
    with pytest.raises(ConfigError) as e:
        compose_run_config("dataset=files", f"dataset.corpus.path={tmp_path}", f"dataset.questions.path={tmp_path}",
                           override)
    message = str(e.value)
    assert f"{key} is not a" in message and f"did you mean {valid}?" in message and listed in message
    assert "unexpected keyword argument" not in message and "\n" not in message


def test_without_plus_a_misspelled_corpus_key_answers_instead_of_hydras_hint():
    problem = unread_dataset_override(["dataset=files", "dataset.corpus.pth=/data/notes"])
    assert problem is not None and "dataset.corpus.pth is not a corpus setting" in problem
    assert "did you mean dataset.corpus.path?" in problem



@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF_DIR / "dataset").glob("*.yaml")))
def test_each_dataset_preset_reads_as_hydra_composes_it(preset):
    # The overrides check reads a preset itself, before Hydra runs: it must see what Hydra composes, the keys and
    # values of the files a preset includes (the FlashRAG question sets' shared base) among them.
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        composed = compose(config_name="config", overrides=[f"dataset={preset}"])
    assert OmegaConf.to_container(dataset_preset(preset), resolve=False) == \
        OmegaConf.to_container(composed.dataset, resolve=False)
