"""Whole runs against a scripted server that behaves as served models do: what each result then means.

A conversation past the model's context window is scored and flagged, so an arm whose tools return longer text keeps
its hardest questions; a server without a tool parser stops the run before its question set is spent; a run whose
tools were never called says so."""

from __future__ import annotations

import json

import pytest

from rollout.errors import ServerSetupError
from rollout.records import TaskResult
from rollout.report.compare.comparison import compare_runs
from rollout.report.rescore import rescore
from rollout.run.config import compose_run_config
from rollout.run.driver import run
from rollout.run.outcome import EXIT_BAD_INPUT, job_end
from rollout.run_folder import TRAJECTORY_FILE
from tests.agents.chat_server import OVERFLOW_BODIES, answer, chat_server

TASKS = 8
RUN = ("agent=openai", "llm.model=test-model", "llm.max_retries=0", "mode=sparse", "dataset.n_passages=400",
       "dataset.n_questions=40", f"dataset.limit={TASKS}", "workers=1", "progress=false")
CONTEXT_CHARS = 2700
"""The scripted model's window, in characters of a request: every conversation fits it with one passage a search,
about half of them with five (measured: 1,589-1,865 characters against 2,490-3,334)."""


def records(folder) -> list[TaskResult]:
    return [TaskResult.from_json(json.loads(line)) for line in (folder / TRAJECTORY_FILE).read_text().splitlines()]


def test_out_of_context_is_scored_and_flagged_and_the_arms_pair_on_every_question(ray_local, cache_dir, tmp_path,
                                                                                  capsys):
    with chat_server() as llm:
        llm.context_chars = CONTEXT_CHARS
        arms = {}
        for top_k in (1, 5):
            arms[top_k] = run(compose_run_config(
                *RUN, f"llm.base_url={llm.base_url}", f"gateway.default_top_k={top_k}", f"cache_dir={cache_dir}",
                f"output_dir={tmp_path / f'top{top_k}'}")).output_dir
    printed = capsys.readouterr().out
    short, long = (json.loads((arms[k] / "evaluation_summary.json").read_text()) for k in (1, 5))
    # Every task of both arms is scored; the long arm's overflows are among them, flagged, with the server's words.
    assert short["n"] == short["scored"] == long["n"] == long["scored"] == TASKS
    assert short["out_of_context"] == 0 and 0 < long["out_of_context"] < TASKS
    assert long["statuses"] == {"ok": TASKS, "error": 0, "timeout": 0, "infra_error": 0}
    overflowed = [r for r in records(arms[5]) if r.out_of_context]
    vllm_said = OVERFLOW_BODIES["vllm"][1]["message"]
    assert len(overflowed) == long["out_of_context"]
    assert all(r.status == "ok" and r.prediction == "" and r.stop_message == vllm_said for r in overflowed)
    [warning] = long["warnings"]
    assert warning.startswith(f"{long['out_of_context']} of {TASKS} tasks ran out of the model's context window")
    assert "--max-model-len" in warning and "agent.max_turns" in warning and f"Warning: {warning}" in printed
    # The paired comparison counts every question on both sides: none of the long arm's hardest ones is dropped.
    comparison = compare_runs([arms[1], arms[5]])
    [pair] = comparison.pairs
    assert pair.shared == pair.metrics["exact_match"].questions == TASKS and pair.only_in_baseline == 0
    assert [r.out_of_context for r in comparison.rows] == [0, long["out_of_context"]]


def test_a_server_without_a_tool_parser_stops_the_run_before_its_questions_are_spent(ray_local, cache_dir, tmp_path):
    with chat_server() as llm:
        llm.text_tool_calls = "hermes"
        cfg = compose_run_config(*RUN, f"llm.base_url={llm.base_url}", f"cache_dir={cache_dir}",
                                 f"output_dir={tmp_path / 'preflight'}")
        end = job_end(lambda: run(cfg))
        # Caught by the preflight's one request offering one tool: no task ran.
        assert end.code == EXIT_BAD_INPUT and "--tool-call-parser hermes" in end.line and "<tool_call>" in end.line
        assert len(llm.chat_requests) == 2 and not (tmp_path / "preflight" / TRAJECTORY_FILE).exists()
        # A model that did not call the tool in the preflight: the first task to meet a call written as text stops it.
        llm.reset()
        llm.text_tool_calls = "llama3_json"
        llm.push(answer("OK"), answer("I would rather not call anything."))
        with pytest.raises(ServerSetupError, match="--tool-call-parser llama3_json"):
            run(compose_run_config(*RUN, f"llm.base_url={llm.base_url}", f"cache_dir={cache_dir}",
                                   f"output_dir={tmp_path / 'mid_run'}"))
    assert records(tmp_path / "mid_run") == []  # nothing recorded: a rerun after the fix asks every question


def test_a_run_whose_tools_were_never_called_says_so(ray_local, cache_dir, tmp_path, capsys):
    with chat_server() as llm:
        llm.push(*[answer("I don't know.") for _ in range(2 + 3)])  # the two preflights, then each task answers
        out = run(compose_run_config(*RUN, "dataset.limit=3", f"llm.base_url={llm.base_url}", f"cache_dir={cache_dir}",
                                     f"output_dir={tmp_path / 'run'}")).output_dir
    summary = json.loads((out / "evaluation_summary.json").read_text())
    [warning] = summary["warnings"]
    assert summary["tools_offered"] == 1 and warning.startswith("the run offered 1 tools and no task made a single tool")
    assert "--jinja" in warning and f"Warning: {warning}" in capsys.readouterr().out


def test_a_run_whose_one_turn_is_the_answer_says_so_and_never_blames_the_server(ray_local, cache_dir, tmp_path,
                                                                                capsys):
    # agent.max_turns=1: the agent's only request is its answering turn, sent with tool_choice "none"; the scripted
    # server, which calls a tool whenever it may, answers. Rollout withheld the tools, not the server.
    with chat_server() as llm:
        out = run(compose_run_config(*RUN, "dataset.limit=3", "agent.max_turns=1", f"llm.base_url={llm.base_url}",
                                     f"cache_dir={cache_dir}", f"output_dir={tmp_path / 'run'}")).output_dir
        assert all(r["tool_choice"] == "none" for r in llm.chat_requests[2:])  # after the two preflights
    summary = json.loads((out / "evaluation_summary.json").read_text())
    [warning] = summary["warnings"]
    assert "agent.max_turns=1 leaves the agent no turn for tools" in warning
    assert "server" not in warning and "--jinja" not in warning and f"Warning: {warning}" in capsys.readouterr().out
    assert rescore(out).warnings == [warning]  # config.yaml's agent.max_turns tells it again
