"""`llm.sampling.seed` is refused for the LLM agents, which send the run's seed (`seed`, plus the repeat) with every
request: it would be replaced on every request and never reach the server."""

from __future__ import annotations

from functools import partial

import pytest

from rollout.agents.openai_agent import OpenAIAgent
from rollout.agents.tagged import TaggedAgent
from rollout.errors import ConfigError
from tests.agents.test_tagged_agent import PROTOCOL
from tests.run.test_exit_status import python_m_rollout

LLM = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": None}


@pytest.mark.parametrize("make, agent", [(OpenAIAgent, "openai"), (partial(TaggedAgent, **PROTOCOL), "tagged")])
def test_an_agent_refuses_a_seed_the_runs_seed_would_replace(make, agent):
    with pytest.raises(ConfigError) as e:
        make({**LLM, "sampling": {"temperature": 0.7, "seed": 7}})
    assert str(e.value) == (f"llm.sampling.seed=7 is never sent: agent={agent} samples every request with the run's "
                            "seed (repeat r gets seed + r), which replaces it; set seed=7 instead")
    make({**LLM, "sampling": {"temperature": 0.7, "seed": None}})  # null is no seed: nothing to refuse


def test_the_command_exits_2_with_one_line_naming_the_seed_to_set(tmp_path):
    done = python_m_rollout("agent=search_r1", "mode=sparse", "llm.model=m", "llm.base_url=http://127.0.0.1:1/v1",
                            "+llm.sampling.seed=7", f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: llm.sampling.seed=7 is never sent" in done.stderr and "set seed=7 instead" in done.stderr
    assert "Traceback" not in done.stderr and "Started Ray" not in done.stderr
    assert not (tmp_path / "out").exists()
