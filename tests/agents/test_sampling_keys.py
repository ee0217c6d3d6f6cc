"""A misspelled `llm.sampling` key is refused before anything runs, naming the key it looks like; a server's own key
(sent in the request body as is) still passes."""

from __future__ import annotations

import pytest

from rollout.errors import ConfigError
from rollout.llm.chat_client import LLMSettings
from rollout.llm.sampling_keys import check_sampling_keys
from rollout.run.config import compose_run_config
from tests.run.test_exit_status import python_m_rollout


@pytest.mark.parametrize("key, meant", [("temprature", "temperature"), ("max_token", "max_tokens"),
                                        ("top_pp", "top_p"), ("repetition_penalt", "repetition_penalty")])
def test_a_misspelled_key_names_the_key_it_looks_like_and_the_known_ones(key: str, meant: str):
    with pytest.raises(ConfigError) as e:
        check_sampling_keys({key: 0.7})
    message = str(e.value)
    assert f"llm.sampling.{key} is not a sampling key" in message and f"did you mean llm.sampling.{meant}?" in message
    assert "temperature, top_logprobs, top_p" in message and "\n" not in message


def test_known_keys_and_a_servers_own_keys_pass():
    check_sampling_keys({"temperature": 0.7, "top_k": 20, "min_p": 0.05, "chat_template_kwargs": {},
                         "my_server_flag": True})
    settings = LLMSettings.from_config({"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                        "sampling": {"temperature": 0.7, "top_k": 20}})
    assert settings.sampling == {"temperature": 0.7, "top_k": 20}


def test_the_llm_block_of_any_client_is_checked():
    with pytest.raises(ConfigError, match="llm.sampling.temprature is not a sampling key"):
        LLMSettings.from_config({"base_url": "http://127.0.0.1:1/v1", "model": "m", "sampling": {"temprature": 0.7}})


@pytest.mark.parametrize("override, says", [
    ("+llm.sampling.temprature=0.7", "did you mean llm.sampling.temperature?"),
    ("+judge.sampling.max_token=64", "did you mean judge.sampling.max_tokens?"),
])
def test_a_run_refuses_it_whatever_the_agent(override: str, says: str):
    with pytest.raises(ConfigError, match=says.replace(".", r"\.").replace("?", r"\?")):
        compose_run_config(override)


def test_the_command_exits_2_with_one_line_before_starting_anything(tmp_path):
    done = python_m_rollout("mode=sparse", "+llm.sampling.temprature=0.7", f"output_dir={tmp_path / 'out'}",
                            cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "llm.sampling.temprature is not a sampling key" in done.stderr and "llm.sampling.temperature" in done.stderr
    assert "Traceback" not in done.stderr and "Started Ray" not in done.stderr
    assert not (tmp_path / "out").exists()
