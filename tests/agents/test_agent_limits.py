"""What real servers do to an agent's conversation, against the scripted server speaking their wire format.

A conversation past the model's context window is the agent's outcome (out of context, the server's words kept),
whichever server refused it and in whichever body; a tool call a server returns as text means it has no tool
parser (the run stops naming the flag, or the call is parsed with `text_tool_calls="parse"`); a last reply that only
calls a tool is no answer, in whatever syntax it wrote the call (llama-cpp-python's own `functions.NAME:`, HTML-escaped,
included).
"""

from __future__ import annotations

from typing import Any

import pytest

from rollout.agents.openai_agent import OpenAIAgent
from rollout.agents.text_tool_calls import find_text_tool_calls
from rollout.errors import ConfigError, ContextWindowExceeded, LLMError, ServerSetupError, UnreadableToolCall
from rollout.events import EventLog, LLMOutputEvent
from rollout.llm.context_window import ContextBudget, is_context_overflow
from rollout.paths import bundled_model_path
from tests.agents.chat_server import (
    OVERFLOW_BODIES,
    UNREADABLE_CALL_SAID,
    Reply,
    answer,
    error,
    overflow,
    tool_calls,
    unreadable_call,
    written_call,
)
from tests.agents.conftest import DENSE, SPARSE
from tests.agents.test_openai_agent import QUESTION, llm, make_agent
from tests.agents.test_tagged_agent import make_agent as make_tagged

FORMATS = ("hermes", "llama3_json", "mistral", "function")


@pytest.mark.parametrize("shape", sorted(OVERFLOW_BODIES))
async def test_each_servers_context_refusal_ends_the_task_as_out_of_context_with_its_words(chat, make_tools, shape):
    # One search, then the next request no longer fits: the agent's answer is "" and its record says why.
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss"})), overflow(shape))
    events = EventLog("t")
    result = await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE), events)
    _, body = OVERFLOW_BODIES[shape]
    inner = body.get("error", body)
    said = inner["message"] if isinstance(inner, dict) else inner
    assert result.out_of_context and result.prediction == "" and not result.out_of_turns
    assert result.stop_message == said and result.turns == 1
    assert len(chat.chat_requests) == 2  # a refusal is not retried: it would fail the same way


@pytest.mark.parametrize("body", [
    {"error": {"message": "temperature must be non-negative", "type": "invalid_request_error", "code": None}},
    {"object": "error", "message": "[{'type': 'missing', 'loc': ('body', 'model')}]", "type": "BadRequestError"},
])
async def test_a_400_that_is_not_about_the_context_stays_an_error(chat, make_tools, body):
    chat.push(Reply(400, body))
    with pytest.raises(LLMError) as raised:
        await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert not isinstance(raised.value, ContextWindowExceeded)


@pytest.mark.parametrize("said", [
    UNREADABLE_CALL_SAID,
    # llama.cpp's newer parser, which quotes what the model generated
    "Failed to parse input at pos 12: </tool_call>",
])
async def test_a_call_the_server_could_not_read_ends_the_task_as_the_models_outcome_not_retried(chat, make_tools,
                                                                                               said):
    # One search, then a reply llama-server's parser cannot read: the model wrote it, so it is its outcome, and at
    # temperature 0 the same call would come back: no second request.
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss"})), unreadable_call(said))
    result = await make_agent(chat.base_url, max_retries=3).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert result.unreadable_call and result.prediction == "" and result.turns == 2
    assert result.stop_message == said and not (result.out_of_context or result.out_of_turns)
    assert len(chat.chat_requests) == 2


@pytest.mark.parametrize("said", ["Failed to parse tools: [json.exception.type_error.302] type must be string",
                                  "Failed to parse messages: tool call arguments must be JSON"])
async def test_a_500_about_the_request_stays_an_error_and_is_retried(chat, make_tools, said):
    chat.push(*[Reply(500, {"error": {"code": 500, "message": said, "type": "server_error"}})] * 2)
    with pytest.raises(LLMError) as raised:
        await make_agent(chat.base_url, max_retries=1).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert not isinstance(raised.value, UnreadableToolCall) and len(chat.chat_requests) == 2


def test_overflow_is_recognised_by_text_code_and_status():
    assert is_context_overflow(400, {"code": "context_length_exceeded", "message": "too long"})
    assert is_context_overflow(400, "This model's maximum context length is 4096 tokens")
    assert not is_context_overflow(500, {"message": "This model's maximum context length is 4096 tokens"})
    assert not is_context_overflow(400, {"message": "Invalid value for tool_choice"})


@pytest.mark.parametrize(("status", "body"), [
    # HTTP 413, with a text that is a refusal at 400 too: the status alone must not turn it away
    (413, {"error": {"message": "This model's maximum context length is 4096 tokens.", "code": None}}),
    # OpenAI's Responses-era text, without the code it usually comes with
    (400, {"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and "
                                "try again.", "type": "invalid_request_error", "param": "input", "code": None}}),
    # TGI's refusal of an input past its max_input_tokens
    (422, {"error": "Input validation error: `inputs` must have less than 1024 tokens. Given: 2647",
           "error_type": "validation"}),
])
def test_each_documented_signal_is_recognised_on_its_own(status, body):
    assert is_context_overflow(status, body)
    assert not is_context_overflow(500, body)


def test_a_413_that_is_not_about_the_context_is_not_an_overflow():
    assert not is_context_overflow(413, "<html><h1>413 Request Entity Too Large</h1></html>")


async def test_the_tagged_agent_ends_out_of_context_on_both_wires(chat, make_tools):
    for wire in ("chat", "completions"):
        chat.reset()
        chat.push(overflow("sglang"))
        agent = make_tagged(chat.base_url, wire=wire)
        result = await agent.run(QUESTION, make_tools(SPARSE), EventLog("t"))
        assert result.out_of_context and result.prediction == "" and result.turns == 0
        assert "longer than the model's context length" in (result.stop_message or "")


async def test_with_a_context_window_a_request_that_cannot_fit_is_never_sent(chat, make_tools):
    # 256 completion tokens in a 300-token window leave too little room for the tools and the question.
    agent = make_agent(chat.base_url, context_window=300)
    result = await agent.run(QUESTION, make_tools(SPARSE, DENSE), EventLog("t"))
    assert result.out_of_context and chat.chat_requests == []
    assert "over llm.context_window=300: not sent" in (result.stop_message or "")
    assert "estimated at 4 characters a token" in result.stop_message
    # A window that fits the first turn lets it through.
    result = await make_agent(chat.base_url, context_window=100_000).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert not result.out_of_context and len(chat.chat_requests) == 2


def test_the_budget_counts_with_a_tokenizer_when_given():
    messages = [{"role": "user", "content": "Where was Arlen Voss born? " * 20}]
    estimate, counted = ContextBudget(10_000), ContextBudget(10_000, bundled_model_path())
    assert estimate.prompt_tokens(messages) == -(-len(messages[0]["content"]) // 4) + 4
    assert counted.prompt_tokens(messages) == 7 * 20 + 4  # WordPiece: where was arlen vo ##ss born ?
    with pytest.raises(ContextWindowExceeded, match="counted with"):
        ContextBudget(100, bundled_model_path()).check(messages, None, {"max_tokens": 10})
    with pytest.raises(ConfigError, match="llm.context_window"):
        ContextBudget(0)


def test_a_request_that_fills_the_window_exactly_is_sent_one_token_more_is_not():
    messages = [{"role": "user", "content": "x" * 400}]  # estimated: 100 tokens, plus 4 for the message
    budget = ContextBudget(104 + 16)
    budget.check(messages, None, {"max_tokens": 16})  # the prompt and the completion fill the window: it fits
    budget.check(messages, None, {"max_completion_tokens": 16, "max_tokens": 17})  # the newer name wins
    with pytest.raises(ContextWindowExceeded, match="need 121 tokens"):
        budget.check(messages, None, {"max_tokens": 17})


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_tool_call_written_as_text_stops_the_run_naming_the_server_flag(chat, make_tools, fmt):
    chat.push(answer(written_call(SPARSE, {"query": "Arlen Voss"}, fmt)))
    with pytest.raises(ServerSetupError) as raised:
        await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    message = str(raised.value)
    assert "--enable-auto-tool-choice --tool-call-parser" in message and "--jinja" in message
    assert "agent.text_tool_calls=parse" in message and SPARSE in message


@pytest.mark.parametrize("fmt", FORMATS)
async def test_with_text_tool_calls_parse_the_written_call_is_run(chat, make_tools, fmt):
    chat.push(answer(written_call(SPARSE, {"query": "Arlen Voss born"}, fmt)), answer("Answer: Kelmor"))
    tools = make_tools(SPARSE)
    agent = OpenAIAgent(llm(chat.base_url), max_turns=3, text_tool_calls="parse")
    result = await agent.run(QUESTION, tools, EventLog("t"))
    assert tools.calls == [(SPARSE, {"query": "Arlen Voss born"})] and result.prediction == "Kelmor"
    second = chat.chat_requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == SPARSE and second[-1]["role"] == "tool"


async def test_a_last_reply_that_only_calls_a_tool_is_out_of_turns_never_its_text(chat, make_tools):
    for last in (answer(written_call(SPARSE, {"query": "again"})), tool_calls((SPARSE, {"query": "again"}))):
        chat.reset()
        chat.push(tool_calls((SPARSE, {"query": "Arlen Voss"})), last)
        events = EventLog("t")
        result = await make_agent(chat.base_url, max_turns=2).run(QUESTION, make_tools(SPARSE), events)
        assert result.out_of_turns and result.prediction == ""
        assert chat.chat_requests[-1]["tool_choice"] == "none"
        assert [e for e in events.events if isinstance(e, LLMOutputEvent)][-1].tool_calls == []


def test_text_that_merely_looks_like_a_call_is_not_one():
    assert find_text_tool_calls('{"name": "Paris"}', {SPARSE}) is None
    # A whole call to another tool is a call, one the model is told it cannot make (tests/agents/test_call_attempts.py).
    assert find_text_tool_calls(written_call("another_tool", {"q": 1}), {SPARSE}).calls[0].offered == (SPARSE,)
    assert find_text_tool_calls("Kelmor", {SPARSE}) is None
    found = find_text_tool_calls("Let me look.\n" + written_call(SPARSE, {"query": "x"}), {SPARSE})
    assert found is not None and found.rest == "Let me look." and found.calls[0].arguments == {"query": "x"}
    qwen3 = (f"<tool_call>\n<function={SPARSE}>\n<parameter=query>\nArlen Voss\n</parameter>\n"
             "<parameter=top_k>\n3\n</parameter>\n</function>\n</tool_call>")
    found = find_text_tool_calls(qwen3, {SPARSE})
    assert found is not None and found.calls[0].arguments == {"query": "Arlen Voss", "top_k": 3} and found.rest == ""
    v11 = f'[TOOL_CALLS]{SPARSE}[ARGS]{{"query": "y"}}'
    assert find_text_tool_calls(v11, {SPARSE}).calls[0].arguments == {"query": "y"}


QWEN_REQUIRED = (f'{{"name": "{SPARSE}", "arguments": {{"query": "Founder of company with register code ORG-4419 born", '
                 '"top_k": 1}}. The exact words that answer the question are "Founder of company wi')
"""Qwen2.5-Coder-0.5B-Instruct on llama.cpp's llama-server --jinja, sent `tool_choice: "required"`: its call as bare
JSON without its template's `<tool_call>` tags (so the server parsed none), then prose until `max_tokens`."""


def test_bare_json_calls_among_text_are_calls_and_the_text_around_them_is_kept():
    [call] = find_text_tool_calls(QWEN_REQUIRED, {SPARSE}).calls
    assert call.format == "json" and call.unread is None
    assert call.arguments == {"query": "Founder of company with register code ORG-4419 born", "top_k": 1}
    assert find_text_tool_calls(QWEN_REQUIRED, {SPARSE}).rest.startswith('. The exact words')
    twice = f'{written_call(SPARSE, {"query": "a"}, "llama3_json")}\n\nI searched: {written_call(SPARSE, {"query": "b"}, "llama3_json")}'
    assert [c.arguments for c in find_text_tool_calls(twice, {SPARSE}).calls] == [{"query": "a"}, {"query": "b"}]
    assert find_text_tool_calls('It is {"name": "Bota Kaiba", "arguments": {"x": 1}}.', {SPARSE}) is None


async def test_a_bare_json_call_among_prose_is_run_with_parse_and_stops_the_run_with_refuse(chat, make_tools):
    chat.push(answer(QWEN_REQUIRED), answer("Answer: 1948"))
    tools = make_tools(SPARSE)
    result = await OpenAIAgent(llm(chat.base_url), max_turns=3, text_tool_calls="parse").run(QUESTION, tools,
                                                                                             EventLog("t"))
    assert tools.calls == [(SPARSE, {"query": "Founder of company with register code ORG-4419 born", "top_k": 1})]
    assert result.prediction == "1948"
    chat.push(answer(QWEN_REQUIRED))
    with pytest.raises(ServerSetupError, match="bare JSON .* agent.text_tool_calls=parse"):
        await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE), EventLog("t"))


LLAMA_CPP_CALL = ("functions.query_knowledge_base_dense:\n"
                  "{ &#34;query&#34;: &#34;who founded veltrix&#34;, &#34;top_k&#34;: 5}")
"""A final reply of SmolLM2-135M-Instruct served by llama-cpp-python 0.3.36 with `--chat_format
chatml-function-calling` on a turn sent with `tool_choice: none` (issue 34): that server's prompt syntax,
HTML-escaped."""


@pytest.mark.parametrize("quote", ["&#34;", "&quot;", '"'])
def test_llama_cpp_pythons_own_call_syntax_is_a_call_escaped_or_not(quote):
    found = find_text_tool_calls(LLAMA_CPP_CALL.replace("&#34;", quote), {DENSE, SPARSE})
    assert found is not None and found.rest == ""
    assert [(c.name, c.arguments, c.format) for c in found.calls] == [
        (DENSE, {"query": "who founded veltrix", "top_k": 5}, "functions")]
    calls = [written_call(name, {"query": q}, "functions") for name, q in ((DENSE, "a"), (SPARSE, "b"))]
    two = "\n".join(["Let me search.", *calls])
    found = find_text_tool_calls(two, {DENSE, SPARSE})
    assert [c.name for c in found.calls] == [DENSE, SPARSE] and found.rest == "Let me search."
    assert find_text_tool_calls(LLAMA_CPP_CALL, {SPARSE}) is None  # a tool not offered
    assert find_text_tool_calls("Use functions.query_knowledge_base_dense: it searches.", {DENSE}) is None


SMOLLM2_CUT_CALL = ("function.query_knowledge_base_sparse:\n"
                    "{&#34;query&#34;: &#34;Bota Kaiba&#34;, &#34;top_k&")
"""What SmolLM2-135M-Instruct wrote on a turn sent with `tool_choice: none` by llama-cpp-python's chatml-function-calling
(tests/llm_server/test_smollm2.py): `function.` for `functions.`, and cut at `max_tokens` inside the arguments."""


def test_a_call_written_as_function_dot_or_cut_short_is_still_a_call():
    whole = SMOLLM2_CUT_CALL.replace("&#34;top_k&", "&#34;top_k&#34;: 5}")
    found = find_text_tool_calls(whole, {SPARSE})
    assert [(c.name, c.arguments, c.unread) for c in found.calls] == [
        (SPARSE, {"query": "Bota Kaiba", "top_k": 5}, None)]
    cut = find_text_tool_calls(SMOLLM2_CUT_CALL, {SPARSE})
    assert [(c.name, c.arguments, c.unread) for c in cut.calls] == [(SPARSE, {}, '{"query": "Bota Kaiba", "top_k&')]
    assert cut.rest == ""
    hermes = find_text_tool_calls('<tool_call>{"name": "%s", "arguments": {"query": "Bo' % SPARSE, {SPARSE})
    assert hermes.calls[0].unread == '{"name": "%s", "arguments": {"query": "Bo' % SPARSE
    # A closed block that is no JSON is a call too, one that could not be read (tests/agents/test_call_attempts.py).
    closed = find_text_tool_calls('<tool_call>{"name": "%s", "arguments": {"q": }</tool_call>' % SPARSE, {SPARSE})
    assert closed.calls[0].unread == '{"name": "%s", "arguments": {"q": }' % SPARSE
    # Not calls: a tool not offered, prose that names the syntax.
    assert find_text_tool_calls(SMOLLM2_CUT_CALL, {DENSE}) is None
    assert find_text_tool_calls("See myfunction.query_knowledge_base_sparse: {1, 2}", {SPARSE}) is None


async def test_a_final_reply_that_is_a_cut_call_is_no_answer_and_earlier_the_model_reads_the_cut(chat, make_tools):
    chat.push(answer(SMOLLM2_CUT_CALL))
    result = await make_agent(chat.base_url, max_turns=1).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert result.out_of_turns and result.prediction == ""
    chat.reset()
    chat.push(answer(SMOLLM2_CUT_CALL, finish_reason="length"), answer("Answer: Mara Quell"))
    tools = make_tools(SPARSE)
    result = await OpenAIAgent(llm(chat.base_url), max_turns=3, text_tool_calls="parse").run(QUESTION, tools,
                                                                                             EventLog("t"))
    assert tools.calls == [] and result.prediction == "Mara Quell"
    [tool_message] = [m for m in chat.chat_requests[-1]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in tool_message["content"] and "cut at the token limit" in tool_message["content"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("quote", ["&#34;", "&quot;"])
def test_a_call_with_entity_escaped_quotes_is_a_call_in_every_format(fmt, quote):
    escaped = written_call(SPARSE, {"query": "Arlen Voss"}, fmt).replace('"', quote)
    found = find_text_tool_calls(escaped, {SPARSE})
    assert found is not None and [(c.name, c.arguments) for c in found.calls] == [(SPARSE, {"query": "Arlen Voss"})]
    assert find_text_tool_calls("Tom &amp; Jerry &#34;Kelmor&#34;", {SPARSE}) is None


@pytest.mark.parametrize("max_turns", [1, 2])
async def test_a_final_reply_in_llama_cpp_pythons_call_syntax_is_never_the_answer(chat, make_tools, max_turns):
    chat.push(*[tool_calls((DENSE, {"query": "veltrix"}))] * (max_turns - 1), answer(LLAMA_CPP_CALL))
    events = EventLog("t")
    result = await make_agent(chat.base_url, max_turns=max_turns).run(QUESTION, make_tools(DENSE), events)
    assert result.out_of_turns and result.prediction == ""
    assert chat.chat_requests[-1]["tool_choice"] == "none"
    last = [e for e in events.events if isinstance(e, LLMOutputEvent)][-1]
    assert last.content is None and last.tool_calls == []


async def test_llama_cpp_pythons_call_syntax_before_the_last_turn_follows_text_tool_calls(chat, make_tools):
    chat.push(answer(LLAMA_CPP_CALL))
    with pytest.raises(ServerSetupError, match=r"chatml-function-calling.*llama-server --jinja.*text_tool_calls=parse"):
        await make_agent(chat.base_url).run(QUESTION, make_tools(DENSE), EventLog("t"))
    chat.reset()
    chat.push(answer(LLAMA_CPP_CALL), answer("Answer: Mara Quell"))
    tools = make_tools(DENSE)
    result = await OpenAIAgent(llm(chat.base_url), max_turns=3, text_tool_calls="parse").run(QUESTION, tools,
                                                                                             EventLog("t"))
    assert tools.calls == [(DENSE, {"query": "who founded veltrix", "top_k": 5})] and result.prediction == "Mara Quell"


def spec(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def test_the_tool_preflight_stops_a_parserless_server_before_any_task(chat):
    chat.text_tool_calls = "hermes"
    with pytest.raises(ServerSetupError, match="--tool-call-parser hermes"):
        make_agent(chat.base_url).check_tools([spec(SPARSE)])
    [probe] = chat.chat_requests
    assert probe["tool_choice"] == "auto" and [t["function"]["name"] for t in probe["tools"]] == [SPARSE]
    # Parsing on the client instead: the same reply lets the run go on.
    OpenAIAgent(llm(chat.base_url), text_tool_calls="parse").check_tools([spec(SPARSE)])
    # A server with a parser calls the tool natively; one whose model does not call it is no proof either way.
    chat.text_tool_calls = None
    make_agent(chat.base_url).check_tools([spec(SPARSE)])
    chat.push(answer("Paris"))
    make_agent(chat.base_url).check_tools([spec(SPARSE)])


def test_a_server_that_refuses_tool_choice_auto_fails_the_preflight_with_its_words(chat):
    chat.push(error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'))
    with pytest.raises(LLMError, match=r"preflight with a tool .*--enable-auto-tool-choice"):
        make_agent(chat.base_url).check_tools([spec(SPARSE)])


def test_a_tool_preflight_the_server_does_not_answer_in_time_lets_the_run_go_on(chat, caplog):
    # A slow server (a long reply on a CPU, llama-cpp-python's "auto", which drops max_tokens) is no reason to stop.
    chat.push(*[error(503, "busy") for _ in range(3)])
    make_agent(chat.base_url).check_tools([spec(SPARSE)])
    assert "tool-parser preflight: no answer" in caplog.text and len(chat.chat_requests) == 3


def test_text_tool_calls_takes_refuse_or_parse():
    with pytest.raises(ConfigError, match="agent.text_tool_calls='yes' must be one of refuse, parse"):
        OpenAIAgent(llm("http://127.0.0.1:1/v1"), text_tool_calls="yes")
