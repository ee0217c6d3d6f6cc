"""A whole run against a server that answers one request at a time says so in its summary: the requests' timings
travel from the workers in the task records (`rollout.report.endpoint`). A server with a slot per request is measured
as such in tests/report/test_endpoint.py, through the same agent without Ray."""

from __future__ import annotations

import json

from rollout.report.endpoint import HINT
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from tests.agents.chat_server import chat_server

TASKS = 3
RUN = ("agent=openai", "llm.model=test-model", "llm.max_retries=0", "mode=sparse", "dataset.n_passages=400",
       "dataset.n_questions=40", f"dataset.limit={TASKS}", "workers=1", f"concurrency_per_worker={TASKS}",
       "progress=false")


def test_the_summary_says_the_endpoint_served_one_request_at_a_time(ray_local, cache_dir, tmp_path, capsys):
    with chat_server() as llm:
        # A second a reply: each server interval is then taken in by 250 ms at both ends (TRIM), more than a loaded
        # 2-core machine delays the client's reading of a reply's end.
        llm.generate_s, llm.slots, llm.timings = 1.0, 1, True
        out = run(compose_run_config(*RUN, f"llm.base_url={llm.base_url}", f"cache_dir={cache_dir}",
                                     f"output_dir={tmp_path / 'run'}")).output_dir
    printed = capsys.readouterr().out
    endpoint = json.loads((out / "evaluation_summary.json").read_text())["llm_endpoint"]
    assert endpoint["requests"] == 2 * TASKS and endpoint["timed_by_server"]
    assert endpoint["sent_at_once"] == TASKS and endpoint["served_at_once"] == 1
    assert f"LLM endpoint: at most 1 request at a time served of {TASKS} sent concurrently" in printed
    assert HINT in printed
