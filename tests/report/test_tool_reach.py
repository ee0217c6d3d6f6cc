"""The summary says when the tool results did not reach the model (the prompt did not grow by what the tools
returned), and says nothing when they did; through a run folder as a run scores it, and through `summarize`."""

from __future__ import annotations

import json

from rollout.accounting import CallAccounting
from rollout.events import LLMOutputEvent, ToolCallEvent, ToolResultEvent
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.scoring import summarize
from rollout.report.tool_calls.reach import ToolReachTally

TOOL_TOKENS = 600


def task(qid: str, prompts: list[int], *, tool_tokens: int = TOOL_TOKENS) -> TaskResult:
    """A task whose LLM steps had these prompt sizes (20 completion tokens each), a search between each two."""
    events, calls = [], []
    for turn, prompt in enumerate(prompts, start=1):
        events.append(LLMOutputEvent(turn=turn, usage={"prompt_tokens": prompt, "completion_tokens": 20}))
        if turn < len(prompts):
            call_id = f"{qid}-{turn}"
            events += [ToolCallEvent(call_id=call_id, name="search", arguments={"query": "q"}),
                       ToolResultEvent(call_id=call_id, name="search", ok=True, outcome="ok", text="...",
                                       latency_ms=1.0)]
            calls.append(ToolCallRecord(call_id=call_id, name="search", arguments={"query": "q"}, ok=True, outcome="ok",
                                        error=None, started=0.0, latency_ms=1.0, result_ids=[], result_doc_ids=[],
                                        reached_gateway=True, accounting=CallAccounting("retrieval", tool_tokens)))
    return TaskResult.answered(Question(qid, "?", ["Paris"]), prediction="Paris", turns=len(prompts), messages=[],
                               usage={}, calls=calls, events=events, worker_id="w0", latency_s=0.1)


def warnings_of(tasks) -> list[str]:
    return summarize(tasks, mode="dense", gateway_file="g.json", wall_time_s=1.0).warnings


def test_a_prompt_that_does_not_grow_by_the_tool_results_is_named_with_the_fix():
    # As llama-cpp-python's chatml-function-calling: each request 73 tokens larger than the last, whatever came back.
    [line] = [w for w in warnings_of([task(f"q{i}", [400, 493, 586]) for i in range(3)]) if "tool results" in w]
    assert "over 6 LLM requests" in line and "grew by 438 tokens while the tools returned 3,600" in line
    assert "llama-server --jinja" in line and "rollout view RUN --task ID" in line


def test_a_prompt_that_grows_by_the_tool_results_says_nothing():
    # The results and the reply reach the next prompt (the gateway's tokenizer counts a little differently).
    seen = [task(f"q{i}", [400, 400 + 20 + 540, 400 + 2 * (20 + 540)]) for i in range(3)]
    assert not [w for w in warnings_of(seen) if "tool results" in w]


def test_no_usage_or_too_little_to_tell_says_nothing():
    tally = ToolReachTally()
    tally.add(task("small", [400, 401], tool_tokens=150))  # 150 tool tokens: under the floor
    assert tally.warning() is None
    no_usage = task("none", [400, 401])
    for event in no_usage.events:
        if isinstance(event, LLMOutputEvent):
            object.__setattr__(event, "usage", None)
    tally = ToolReachTally()
    tally.add(no_usage)
    assert tally.steps == 0 and tally.warning() is None


def test_a_run_folder_scored_as_a_run_scores_it_keeps_the_events_for_it(tmp_path):
    from rollout.report.rescore import RunFacts, ScoringConfig, score_folder

    (tmp_path / "trajectory.jsonl").write_text(
        "".join(json.dumps(task(f"q{i}", [400, 493, 586]).to_json()) + "\n" for i in range(3)), encoding="utf-8")
    facts = RunFacts(wall_time_s=1.0, complete=True, deterministic_agent=False, degraded_tools={}, tools_offered=1)
    summary = score_folder(tmp_path, ScoringConfig(mode="dense", gateway_file="g.json"), facts)
    assert any("the tool results seem not to reach the model" in w for w in summary.warnings)
