"""A whole run against a server that answers one request at a time says so in its summary, and one with a slot per
request does not: the requests' timings travel from the workers in the task records (`rollout.report.endpoint`)."""

from __future__ import annotations

import json

import pytest

from rollout.report.endpoint import HINT
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from tests.agents.chat_server import chat_server

TASKS = 4
RUN = ("agent=openai", "llm.model=test-model", "llm.max_retries=0", "mode=sparse", "dataset.n_passages=400",
       "dataset.n_questions=40", f"dataset.limit={TASKS}", "workers=1", f"concurrency_per_worker={TASKS}",
       "progress=false")


@pytest.mark.parametrize("slots", [1, TASKS])
def test_the_summary_says_how_many_requests_the_endpoint_served_at_once(ray_local, cache_dir, tmp_path, capsys, slots):
    with chat_server() as llm:
        llm.generate_s, llm.slots, llm.timings = 0.5, slots, True
        out = run(compose_run_config(*RUN, f"llm.base_url={llm.base_url}", f"cache_dir={cache_dir}",
                                     f"output_dir={tmp_path / 'run'}")).output_dir
    printed = capsys.readouterr().out
    endpoint = json.loads((out / "evaluation_summary.json").read_text())["llm_endpoint"]
    assert endpoint["requests"] == 2 * TASKS and endpoint["timed_by_server"]
    assert endpoint["sent_at_once"] == TASKS and endpoint["served_at_once"] == slots
    served = "1 request" if slots == 1 else f"{TASKS} requests"
    assert f"LLM endpoint: at most {served} at a time served of {TASKS} sent concurrently" in printed
    assert (HINT in printed) is (slots == 1)
