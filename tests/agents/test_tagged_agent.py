"""The tagged-text agent (agent=search_r1, agent=tagged) against the scripted server on loopback (chat_server.py).

Replies are Search-R1-shaped text stopped at a closing tag, sent the way vLLM, SGLang or a plain server sends
them; searches go through a real environment session to a real sparse-only gateway (three passages, see
loopback.py), so the information blocks below are what the gateway returned, formatted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs import HttpMCPRagEnv
from rollout.agents.tagged import TaggedAgent
from rollout.errors import LLMError
from rollout.events import CompletionEvent, EventLog, LLMOutputEvent, ToolCallEvent, ToolResultEvent
from rollout.gateway_file import GATEWAYS_DIR
from rollout.records import Question, TaskResult
from rollout.report.scoring import summarize
from tests.agents.chat_server import MODEL, error, said, usage
from tests.agents.conftest import DENSE, SPARSE
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import PASSAGES, sparse_kb

SPARSE_ONLY = GATEWAYS_DIR / "rag_sparse_only.json"
CHATML = Path(__file__).parent / "data" / "chatml"
QUESTION = "Where was Arlen Voss born?"

SEARCH_R1_INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> "
    "query </search> and it will return the top searched results between <information> and </information>. You can "
    "search as many times as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing "
    "</answer>. Question: {question}\n"
)
"""scripts/data_process/nq_search.py make_prefix('base') of Search-R1, typed from its source."""
INVALID = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
"""search_r1/llm_agent/generation.py's feedback for a turn with neither tag."""
PROTOCOL: dict[str, Any] = {
    "instruction": SEARCH_R1_INSTRUCTION,
    "searches": [{"open": "<search>", "close": "</search>", "tool": None}],
    "answer": {"open": "<answer>", "close": "</answer>"},
    "information": "\n\n<information>{results}</information>\n\n",
    "passage": "Doc {i}(Title: {title}) {text}\n",
    "invalid": INVALID,
}
BY_ID = {p.id: p for p in PASSAGES}


@pytest.fixture(scope="module")
async def env(tmp_path_factory) -> Any:
    with gateway_on_loopback(SPARSE_ONLY, sparse_kb(), tmp_path_factory.mktemp("gw")) as url:
        async with HttpMCPRagEnv(url, SPARSE_ONLY) as e:
            yield e


def make_agent(base_url: str, **overrides: Any) -> TaggedAgent:
    llm = {"base_url": base_url, "model": MODEL, "api_key_env": None, "timeout_s": 10, "max_retries": 2,
           "sampling": {"temperature": 0.0, "max_tokens": 64}}
    return TaggedAgent(llm, **{**PROTOCOL, "backoff_base_s": 0.001, "backoff_max_s": 0.01, **overrides})


def information(*ids: str) -> str:
    """The block Search-R1 appends for these passages, written out by hand."""
    docs = "\n".join(f"Doc {i}(Title: {BY_ID[d].title}) {BY_ID[d].text}" for i, d in enumerate(ids, 1))
    return f"\n\n<information>{docs}</information>\n\n"


def outputs(events: EventLog) -> list[LLMOutputEvent]:
    return [e for e in events.events if isinstance(e, LLMOutputEvent)]


def record(result: Any, events: EventLog) -> TaskResult:
    """The task's record as the worker makes it, read back from its trajectory line."""
    events.emit(CompletionEvent(prediction=result.prediction, turns=result.turns))
    task = TaskResult.answered(Question("q1", QUESTION, ["Kelmor"]), prediction=result.prediction, turns=result.turns,
                               messages=result.messages, usage=result.usage, calls=[], events=events.events,
                               worker_id="w0", latency_s=0.1, out_of_turns=result.out_of_turns)
    return TaskResult.from_json(json.loads(json.dumps(task.to_json())))


def continued(messages: list[dict[str, Any]], upto: int) -> str:
    """The text after the instruction the model continued at request `upto` (0-based): the messages rule."""
    return "".join(m["content"] for m in messages[1:1 + 2 * upto])


async def test_search_then_answer_over_the_chat_path(chat, env):
    chat.push(said("<think>I need his birthplace.</think>\n<search> Arlen Voss born ", stop="</search>",
                   tokens=usage(30, 7)),
              said("<think>Doc 1 says Kelmor.</think>\n<answer> Kelmor ", stop="</answer>", tokens=usage(80, 6)))
    events = EventLog("t1")
    session = env.for_task("t1", events)
    result = await make_agent(chat.base_url).run(QUESTION, session, events)

    assert (result.prediction, result.turns, result.out_of_turns) == ("Kelmor", 2, False)
    assert result.usage == {"prompt_tokens": 110, "completion_tokens": 13, "total_tokens": 123}
    [call] = session.calls
    assert (call.name, call.arguments, call.outcome, call.result_ids) == (
        SPARSE, {"query": "Arlen Voss born", "top_k": 3}, "ok", ["d0"])
    instruction = SEARCH_R1_INSTRUCTION.replace("{question}", QUESTION)
    first_turn = "<think>I need his birthplace.</think>\n<search> Arlen Voss born </search>"
    assert result.messages == [
        {"role": "user", "content": instruction},
        {"role": "assistant", "content": first_turn},
        {"role": "user", "content": information("d0")},
        {"role": "assistant", "content": "<think>Doc 1 says Kelmor.</think>\n<answer> Kelmor </answer>"},
    ]
    first, second = chat.chat_requests
    assert first["messages"] == [{"role": "user", "content": instruction}]
    assert "continue_final_message" not in first and first["stop"] == ["</search>", "</answer>"]
    # The second request continues the model's own text, the information block appended to it.
    assert second["messages"] == [{"role": "user", "content": instruction},
                                  {"role": "assistant", "content": first_turn + information("d0")}]
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False
    assert "tools" not in second and second["max_tokens"] == 64

    assert [type(e) for e in events.events] == [LLMOutputEvent, ToolCallEvent, ToolResultEvent, LLMOutputEvent]
    out1, out2 = outputs(events)
    assert out1.content == first_turn and out1.finish_reason == "stop" and out1.usage == usage(30, 7)
    assert out1.tool_calls == [{"id": "call_1", "name": SPARSE, "arguments": {"query": "Arlen Voss born", "top_k": 3}}]
    assert out1.latency_ms > 0 and out2.tool_calls == [] and out2.content.endswith("</answer>")


async def test_two_searches_over_the_completions_path_follow_the_messages_rule(chat, env):
    # The completions prompt is the chat template's rendering of the instruction, then the model's text so far.
    chat.push(said("<search> Arlen Voss born ", stop="</search>"),
              said("<think>Now the city.</think> <search> Voss city ", stop="</search>"),
              said("<answer> Kelmor, Dravia ", stop="</answer>"))
    events = EventLog("t2")
    agent = make_agent(chat.base_url, wire="completions", chat_template=str(CHATML), top_k=2)
    session = env.for_task("t2", events)
    result = await agent.run(QUESTION, session, events, seed=7)

    assert (result.prediction, result.turns) == ("Kelmor, Dravia", 3)
    instruction = SEARCH_R1_INSTRUCTION.replace("{question}", QUESTION)
    head = ("<|startoftext|><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{instruction}<|im_end|>\n<|im_start|>assistant\n")
    prompts = [r["prompt"] for r in chat.completion_requests]
    assert prompts == [head + continued(result.messages, i) for i in range(3)]
    assert result.messages[2]["content"] == information("d0")
    second = session.calls[1].result_ids
    assert len(second) == 2 and result.messages[4]["content"] == information(*second)  # one passage a line
    # The last prompt is everything: the rendered instruction, then every later message's content, byte for byte.
    assert prompts[-1] + result.messages[-1]["content"] == head + "".join(m["content"] for m in result.messages[1:])
    assert all(r["seed"] == 7 and r["stop"] == ["</search>", "</answer>"] for r in chat.completion_requests)
    assert chat.chat_requests == []


@pytest.mark.parametrize(("kind", "keep_stop"), [("vllm", False), ("vllm", True), ("sglang", False),
                                                   ("plain", False), ("plain", True)])
@pytest.mark.parametrize("wire", ["chat", "completions"])
async def test_a_kept_or_dropped_stop_string_gives_the_same_conversation(chat, env, kind, keep_stop, wire):
    chat.push(said("<search> Arlen Voss born ", stop="</search>", server=kind, keep_stop=keep_stop),
              said("<answer> Kelmor ", stop="</answer>", server=kind, keep_stop=keep_stop))
    events = EventLog("t3")
    result = await make_agent(chat.base_url, wire=wire).run(QUESTION, env.for_task("t3", events), events)
    assert result.prediction == "Kelmor"
    assert [m["content"] for m in result.messages[1:]] == [
        "<search> Arlen Voss born </search>", information("d0"), "<answer> Kelmor </answer>"]


async def test_an_end_of_sequence_inside_an_open_tag_is_not_a_search(chat, env):
    # vLLM says no stop string matched (stop_reason null): the tag was never closed, so nothing is searched.
    chat.push(said("<search> Arlen Voss"), said("<answer> Kelmor ", stop="</answer>"))
    events = EventLog("t4")
    session = env.for_task("t4", events)
    result = await make_agent(chat.base_url).run(QUESTION, session, events)
    assert session.calls == [] and result.messages[1:3] == [
        {"role": "assistant", "content": "<search> Arlen Voss"}, {"role": "user", "content": INVALID}]


async def test_a_turn_without_a_tag_gets_search_r1_s_feedback(chat, env):
    chat.push(said("I believe he was born in Kelmor."), said("<answer> Kelmor ", stop="</answer>"))
    events = EventLog("t5")
    session = env.for_task("t5", events)
    result = await make_agent(chat.base_url).run(QUESTION, session, events)
    assert (result.prediction, result.turns, session.calls) == ("Kelmor", 2, [])
    second = chat.chat_requests[1]["messages"][-1]
    assert second == {"role": "assistant", "content": "I believe he was born in Kelmor." + INVALID}
    assert [e.tool_calls for e in outputs(events)] == [[], []]


async def test_a_server_that_sends_the_continued_text_back_first_is_read_from_its_continuation(chat, env):
    # llama.cpp's llama-server (--jinja) answers a continued assistant message with that message followed by what
    # the model wrote; the feedback in it names the tags ("between <search> and </search>"), so reading the whole
    # reply would run a search for "and" the model never asked for.
    first = "<think>He is a person.</think>"
    chat.push(said(first), said(first + INVALID + "<answer> Kelmor ", stop="</answer>", server="plain"))
    events = EventLog("t5e")
    session = env.for_task("t5e", events)
    result = await make_agent(chat.base_url).run(QUESTION, session, events)
    assert (result.prediction, result.turns, session.calls) == ("Kelmor", 2, [])
    assert result.messages[3] == {"role": "assistant", "content": "<answer> Kelmor </answer>"}
    assert [e.content for e in outputs(events)] == [first, "<answer> Kelmor </answer>"]


async def test_invalid_null_ends_the_task_at_a_turn_without_a_tag(chat, env):
    chat.push(said("I believe he was born in Kelmor."), said("<answer> Kelmor ", stop="</answer>"))
    result = await make_agent(chat.base_url, invalid=None).run(QUESTION, env.for_task("t6"), EventLog("t6"))
    assert (result.prediction, result.turns, result.out_of_turns) == ("", 1, False)
    assert len(chat.chat_requests) == 1


async def test_no_answer_within_the_budget_is_out_of_turns_and_counted(chat, env):
    chat.push(said("<search> Arlen Voss ", stop="</search>"), said("<search> Voss birthplace ", stop="</search>"))
    events = EventLog("t7")
    session = env.for_task("t7", events)
    result = await make_agent(chat.base_url, max_turns=2).run(QUESTION, session, events)

    assert (result.prediction, result.turns, result.out_of_turns) == ("", 2, True)
    assert [c.arguments["query"] for c in session.calls] == ["Arlen Voss"]  # the last turn's search is not run
    assert outputs(events)[-1].tool_calls == [] and result.messages[-1]["content"].endswith("</search>")
    task = record(result, events)
    assert (task.status, task.prediction, task.out_of_turns, task.truncated) == ("ok", "", True, False)
    chat.push(said("<answer> Kelmor ", stop="</answer>"))
    events = EventLog("t8")
    answered = record(await make_agent(chat.base_url).run(QUESTION, env.for_task("t8"), events), events)
    summary = summarize([task, answered], mode="sparse", gateway_file=str(SPARSE_ONLY), wall_time_s=1.0)
    assert (summary.n, summary.scored, summary.out_of_turns) == (2, 2, 1)
    assert summary.to_json()["out_of_turns"] == 1 and summary.metrics["exact_match"] == 0.5


async def test_a_reply_cut_at_the_token_limit_is_never_a_search_or_an_answer(chat, env):
    chat.push(said("<think>Voss, Voss, Voss", finish_reason="length"),
              said("<answer> Kel", finish_reason="length", server="plain"),  # no stop field: the cut alone tells
              said("<answer> Kelmor ", stop="</answer>"))
    events = EventLog("t9")
    session = env.for_task("t9", events)
    result = await make_agent(chat.base_url).run(QUESTION, session, events)
    assert (result.prediction, result.turns, session.calls) == ("Kelmor", 3, [])
    assert [m["content"] for m in result.messages[1:5]] == ["<think>Voss, Voss, Voss", INVALID, "<answer> Kel", INVALID]
    assert [e.finish_reason for e in outputs(events)] == ["length", "length", "stop"]
    assert record(result, events).truncated is False  # the answer itself was not cut

    chat.push(said("<answer> Kel", finish_reason="length"))
    events = EventLog("t10")
    result = await make_agent(chat.base_url, max_turns=1).run(QUESTION, env.for_task("t10"), events)
    task = record(result, events)
    assert (task.prediction, task.out_of_turns, task.truncated) == ("", True, True)


async def test_two_search_tags_call_two_tools_in_hybrid_mode(chat, make_tools):
    tools = make_tools(DENSE, SPARSE)
    searches = [{"open": "<search_dense>", "close": "</search_dense>", "tool": DENSE},
                {"open": "<search_sparse>", "close": "</search_sparse>", "tool": SPARSE}]
    chat.push(said("<search_sparse> ORG-5521 ", stop="</search_sparse>"),
              said("<search_dense> a company that makes looms ", stop="</search_dense>"),
              said("<answer> x ", stop="</answer>"))
    agent = make_agent(chat.base_url, searches=searches, top_k=1)
    result = await agent.run(QUESTION, tools, EventLog("t11"))
    assert tools.calls == [(SPARSE, {"query": "ORG-5521", "top_k": 1}),
                           (DENSE, {"query": "a company that makes looms", "top_k": 1})]
    assert result.prediction == "x" and result.messages[2]["content"].startswith("\n\n<information>Doc 1(Title: ")
    assert chat.chat_requests[0]["stop"] == ["</search_dense>", "</search_sparse>", "</answer>"]


async def test_r1_searcher_s_protocol_is_configuration(chat, env):
    from rollout.run.config import compose_run_config

    spec = compose_run_config("agent=r1_searcher", "llm.model=m").agent
    protocol = {k: spec[k] for k in ("instruction", "searches", "answer", "information", "passage", "strip_results",
                                     "no_results", "invalid", "stop", "wire", "top_k", "max_turns")}
    chat.push(said("Let me search.\n<|begin_of_query|> Arlen Voss born", stop="<|end_of_query|>"),
              said("<|begin_of_query|> zzz", stop="<|end_of_query|>"),
              said("He was born in Kelmor.</think>\n\n<answer> Kelmor ", stop="</answer>"))
    events = EventLog("t12")
    result = await make_agent(chat.base_url, **protocol).run(QUESTION, env.for_task("t12", events), events)
    assert result.prediction == "Kelmor"
    prompts = [r["prompt"] for r in chat.completion_requests]
    assert prompts[0] == spec["instruction"].replace("{question}", QUESTION) and prompts[0].endswith("Assistant: <think>")
    assert prompts[1].endswith("Arlen Voss born<|end_of_query|>\n\n<|begin_of_documents|>\n"
                               "(1)Arlen Voss   Arlen Voss was born in Kelmor in 1961.\n<|end_of_documents|>\n\n")
    assert prompts[2].endswith("zzz<|end_of_query|>\n\n<|begin_of_documents|>\nNone<|end_of_documents|>\n\n")
    assert chat.completion_requests[0]["stop"] == ["<|im_end|>", "<|endoftext|>", "<|end_of_query|>", "</answer>"]


async def test_a_tool_error_goes_back_in_the_information_block(chat, make_tools):
    chat.push(said("<search> Voss ", stop="</search>"), said("<answer> ? ", stop="</answer>"))
    result = await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE, failing=[SPARSE]), EventLog("t"))
    assert result.messages[2]["content"] == "\n\n<information>retrieval backend unavailable</information>\n\n"


async def test_5xx_on_the_completions_path_is_retried_and_4xx_is_not(chat, env):
    chat.push(error(503, "loading"), said("<answer> Kelmor ", stop="</answer>"))
    agent = make_agent(chat.base_url, wire="completions")
    result = await agent.run(QUESTION, env.for_task("t13"), EventLog("t13"))
    assert result.prediction == "Kelmor" and len(chat.completion_requests) == 2
    chat.push(error(404, "Not Found"))
    with pytest.raises(LLMError, match="agent.wire=completions needs a server with /v1/completions"):
        await agent.run(QUESTION, env.for_task("t14"), EventLog("t14"))


@pytest.mark.parametrize(("wire", "route"), [("chat", "messages"), ("completions", "prompt")])
async def test_check_asks_the_wire_the_agent_uses(chat, wire, route):
    await make_agent(chat.base_url, wire=wire).check()
    [request] = chat.requests
    assert route in request and request["max_tokens"] == 1


async def test_check_names_the_agent_when_the_model_is_unknown(chat):
    chat.push(error(404, "The model `test-model` does not exist."))
    with pytest.raises(LLMError, match=r"agent=tagged preflight \(llm.model=test-model\).*check llm.model"):
        await make_agent(chat.base_url, wire="completions").check()


@pytest.mark.parametrize("wire", ["chat", "completions"])
async def test_the_unscripted_server_plays_a_search_r1_model(chat, env, wire):
    # Its default policy searches the question, then answers with the first passage's title (see chat_server.py).
    events = EventLog("t15")
    session = env.for_task("t15", events)
    result = await make_agent(chat.base_url, wire=wire).run(QUESTION, session, events)
    assert (result.prediction, result.turns) == ("Arlen Voss", 2)
    assert [c.arguments["query"] for c in session.calls] == [QUESTION]


async def test_a_worker_records_a_task_that_ran_out_of_turns(chat, tmp_path):
    # The worker as a run builds it (agent=search_r1 from the composed config), outside Ray, on a real gateway.
    from rollout.run.config import compose_run_config
    from rollout.run.worker import EnvSpec, RolloutWorker

    spec = compose_run_config("agent=search_r1", f"llm.base_url={chat.base_url}", "llm.model=test-model",
                              "agent.max_turns=2").agent
    chat.push(said("<search> Arlen Voss ", stop="</search>"), said("<search> Voss again ", stop="</search>"))
    with gateway_on_loopback(SPARSE_ONLY, sparse_kb(), tmp_path) as url:
        worker = RolloutWorker("w0", EnvSpec(url, str(SPARSE_ONLY)), spec)
        try:
            task = await worker.run_task(Question("q1", QUESTION, ["Kelmor"]), seed=5)
        finally:
            await worker.close()
    assert (task.status, task.prediction, task.turns, task.out_of_turns) == ("ok", "", 2, True)
    assert [c.name for c in task.tool_calls] == [SPARSE] and task.usage["total_tokens"] == 50
    assert json.loads(json.dumps(task.to_json()))["out_of_turns"] is True
    assert [r["seed"] for r in chat.chat_requests] == [5, 5]
