"""The modes' system prompts ask for an answer any question set can have, and resuming a folder written under the
earlier prompts names the words that changed."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rollout.errors import ConfigError
from rollout.paths import CONF_DIR
from rollout.run.config import compose_run_config
from rollout.run.identity import RunIdentity
from rollout.run.resume import finished_tasks

MODES = sorted(p.stem for p in (CONF_DIR / "mode").glob("*.yaml") if not p.stem.startswith("bcp_"))
"""Every mode but BrowseComp-Plus' (which asks for its own answer format)."""
ASKS = "short final answer only: the exact words that answer the question, no explanation."
ASKED_BEFORE = "short final answer only (a name, place, number or year)."
"""What the prompts asked before: wrong for a question set of dates, titles, phrases or yes/no."""


@pytest.mark.parametrize("mode", MODES)
def test_each_modes_prompt_asks_for_the_words_that_answer_not_for_a_kind_of_answer(mode):
    prompt = " ".join(compose_run_config(f"mode={mode}").system_prompt.split())
    assert ASKS in prompt and "place, number or year" not in prompt


def test_the_generic_prompt_asks_the_same():
    prompt = " ".join(OmegaConf.load(CONF_DIR / "prompt" / "generic.yaml").system_prompt.split())
    assert ASKS in prompt and "place, number or year" not in prompt


def test_a_prompt_chosen_apart_from_the_mode_goes_before_the_modes_tools_and_names_the_folder():
    hybrid, sparse_prompt = compose_run_config("mode=hybrid"), compose_run_config("mode=sparse").system_prompt
    chosen = compose_run_config("mode=hybrid", "prompt=sparse")
    assert chosen.system_prompt == sparse_prompt != hybrid.system_prompt
    assert chosen.gateway_config_path == hybrid.gateway_config_path and chosen.mode_name == "hybrid"
    assert chosen.output_dir.name == "hybrid,prompt=sparse" and hybrid.output_dir.name == "hybrid"
    # Every shipped prompt file is some mode's, or the generic one a mode of one's own gets.
    prompts = {p.stem for p in (CONF_DIR / "prompt").glob("*.yaml")}
    assert prompts == {p.stem for p in (CONF_DIR / "mode").glob("*.yaml")} - {"bcp_dense"} | {"generic"}


def test_a_prompt_chosen_where_the_mode_writes_its_own_is_refused_not_ignored(tmp_path):
    (tmp_path / "mode").mkdir()
    (tmp_path / "mode" / "mine.yaml").write_text("# @package _global_\nmode_name: mine\n"
                                                 "gateway_config_path: conf/gateways/rag_sparse_only.json\n"
                                                 "system_prompt: my own words\n")
    mine = ("mode=mine", f"hydra.searchpath=[file://{tmp_path}]")
    assert compose_run_config(*mine).system_prompt == "my own words"
    for overrides in ((*mine, "prompt=sparse"), ("mode=sparse", "prompt=generic", "system_prompt=other words")):
        with pytest.raises(ConfigError, match=r"prompt=(sparse|generic) would not be used: .*override /prompt"):
            compose_run_config(*overrides)
    assert compose_run_config("mode=sparse", "prompt=generic").system_prompt.startswith("You answer")


def test_resuming_a_folder_of_the_earlier_prompt_names_the_words_that_changed(tmp_path):
    prompt = compose_run_config("mode=sparse").system_prompt
    earlier = prompt.replace(ASKS, ASKED_BEFORE)
    assert earlier != prompt
    (tmp_path / "trajectory.jsonl").write_text('{"id": "a", "status": "ok"}\n')
    finished_tasks(tmp_path, RunIdentity(settings={"system_prompt": earlier}, gateway_file_sha256="g",
                                         tools={"t": "a" * 64}, dataset={}))
    with pytest.raises(ConfigError) as refused:
        finished_tasks(tmp_path, RunIdentity(settings={"system_prompt": prompt}, gateway_file_sha256="g",
                                             tools={"t": "a" * 63 + "b"}, dataset={}))
    message = str(refused.value)
    assert '"…a short final answer only (a name, place, number or year)." → "…a short final answer only: the exact ' \
        'words that answer the q…"' in message, message
    assert "resume=false" in message
    assert f"tool.t: {'a' * 12} → {'a' * 12}" in message  # a hash is shown by its head, as before
