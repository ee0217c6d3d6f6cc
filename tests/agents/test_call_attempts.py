"""A reply that opens as a call to an offered tool is a call attempt, never an answer, whatever follows the opening.

SmolLM2 on llama-cpp-python's chatml-function-calling once ended a task with a call whose arguments were no JSON;
read as no call at all, it was scored as the answer. A call that cannot be read is now no answer on the last turn
(`out_of_turns`), and before it the model reads why its call was not run, in either `agent.text_tool_calls` setting
(a server with a tool parser returns a call its parser cannot read as text too, so it tells nothing of the server).
"""

from __future__ import annotations

import pytest

from rollout.agents.openai_agent import OpenAIAgent
from rollout.agents.text_tool_calls import find_text_tool_calls, unread_call_error
from rollout.events import EventLog, LLMOutputEvent
from tests.agents.chat_server import answer
from tests.agents.conftest import DENSE, SPARSE
from tests.agents.test_agent_limits import spec
from tests.agents.test_openai_agent import QUESTION, llm, make_agent

SMOLLM2_BAD_CALL = "functions.query_knowledge_base_sparse:\n{ &#34;query&#34;: &#39;Vocail Kreinath WHERE name = #10;}"
"""A final reply of SmolLM2 on llama-cpp-python's chatml-function-calling: the call's prefix, then arguments that are
no JSON (a single quote, and the object never closed)."""

ATTEMPTS = {
    "functions": SMOLLM2_BAD_CALL,
    "function_dot": f"function.{SPARSE}: Vocail Kreinath",
    "functions_empty": f"functions.{SPARSE}:",
    "hermes": f'<tool_call>\n{{"name": "{SPARSE}", "arguments": {{"query": }}\n</tool_call>',
    "hermes_string_arguments": f'<tool_call>{{"name": "{SPARSE}", "arguments": "Vocail Kreinath"}}</tool_call>',
    "llama3_json": f'{{"name": "{SPARSE}", "parameters": {{"query": \'Vocail\'}}}}',
    "llama3_list_arguments": f'<|python_tag|>{{"name": "{SPARSE}", "parameters": ["Vocail"]}}',
    "fenced": f'```json\n{{"name": "{SPARSE}", "arguments": {{query: Vocail}}}}\n```',
    "function_tag": f"<function={SPARSE}>Vocail Kreinath</function>",
    "mistral": f'[TOOL_CALLS] [{{"name": "{SPARSE}", "arguments": {{"query": Vocail}}}}]',
}
"""Each recognised call prefix naming an offered tool, followed by arguments that cannot be read."""


@pytest.mark.parametrize("kind", sorted(ATTEMPTS))
def test_a_reply_that_opens_with_a_call_prefix_is_a_call_that_could_not_be_read(kind):
    found = find_text_tool_calls(ATTEMPTS[kind], {SPARSE, DENSE})
    assert found is not None and found.rest == ""
    [call] = found.calls
    assert call.name == SPARSE and call.arguments == {} and call.unread is not None


def test_what_does_not_open_as_a_call_to_an_offered_tool_is_no_attempt():
    for text in (f"The answer is Kelmor. functions.{SPARSE}: was not needed.",  # prose that names the syntax
                 "functions.another_tool:\n{'query': 'x'}",  # a tool not offered
                 '{"name": "Paris", "country": France}',  # JSON-ish prose with a name that is no tool
                 'The record reads {"name": "lookup", "arguments": {}}.',  # another tool's call, not opening the reply
                 "Kelmor"):
        assert find_text_tool_calls(text, {SPARSE}) is None, text


QWEN_UNKNOWN_TOOL = '{"name": "registry_id", "arguments": {"registry_id": "P-92941"}}. The registry id is P-92941.'
"""A final answer Qwen2.5-Coder-0.5B wrote on the demo: a whole call to a tool it made up, then prose."""


def test_a_reply_that_opens_as_a_whole_call_to_a_tool_not_offered_is_an_attempt_never_an_answer():
    for text, fmt in ((QWEN_UNKNOWN_TOOL, "llama3_json"),
                      ('<tool_call>{"name": "web_search", "arguments": {}}</tool_call>', "hermes"),
                      ('[{"name": "lookup", "parameters": {"q": "x"}}]', "llama3_json"),
                      # a made-up name of several words, as the 0.5B wrote one
                      ('{"name": "Vodin Industries", "arguments": {"query": "Founder", "top_k": 1}}. The founder',
                       "llama3_json")):
        found = find_text_tool_calls(text, {SPARSE, DENSE})
        assert found is not None and found.rest == "", text
        [call] = found.calls
        assert call.format == fmt and call.unread == text and call.offered == tuple(sorted((SPARSE, DENSE)))
        said = unread_call_error(call, cut=False)
        assert said.startswith(f"Error: there is no tool named {call.name}; the tool was not called.")
        assert f"The tools are {DENSE}, {SPARSE}:" in said


async def test_a_call_to_a_tool_not_offered_is_told_to_the_model_and_is_no_final_answer(chat, make_tools):
    chat.push(answer(QWEN_UNKNOWN_TOOL), answer(QWEN_UNKNOWN_TOOL))
    events = EventLog("t")
    result = await make_agent(chat.base_url, max_turns=2).run(QUESTION, make_tools(SPARSE), events)
    assert result.out_of_turns and result.prediction == ""
    told = chat.chat_requests[-1]["messages"][-2]
    assert told["role"] == "tool" and told["content"].startswith("Error: there is no tool named registry_id")


def test_the_model_reads_why_its_call_could_not_be_read():
    [call] = find_text_tool_calls(SMOLLM2_BAD_CALL, {SPARSE}).calls
    said = unread_call_error(call, cut=False)
    assert said.startswith(f"Error: your call to {SPARSE} could not be read") and "not valid JSON" in said
    assert "the tool was not called" in said and "token limit" not in said
    assert "cut at the token limit" in unread_call_error(call, cut=True)
    [listed] = find_text_tool_calls(ATTEMPTS["llama3_list_arguments"], {SPARSE}).calls
    assert "not a JSON object (got list)" in unread_call_error(listed, cut=False)
    several = f'[{{"name": "{SPARSE}", "arguments": {{"query": "a"}}}}, {{"name": "web_search", "arguments": {{}}}}]'
    [both] = find_text_tool_calls(several, {SPARSE}).calls
    assert both.unread == several
    assert "does not read as calls to the tools offered" in unread_call_error(both, cut=False)


@pytest.mark.parametrize("max_turns", [1, 2])
async def test_a_final_reply_that_is_an_unreadable_call_is_no_answer(chat, make_tools, max_turns):
    chat.push(*[answer(ATTEMPTS["hermes"])] * (max_turns - 1), answer(SMOLLM2_BAD_CALL))
    events = EventLog("t")
    result = await make_agent(chat.base_url, max_turns=max_turns).run(QUESTION, make_tools(SPARSE), events)
    assert result.out_of_turns and result.prediction == ""
    assert chat.chat_requests[-1]["tool_choice"] == "none"
    last = [e for e in events.events if isinstance(e, LLMOutputEvent)][-1]
    assert last.content is None and last.tool_calls == []


@pytest.mark.parametrize("setting", ["refuse", "parse"])
async def test_before_the_last_turn_the_model_reads_that_its_call_could_not_be_read(chat, make_tools, setting):
    chat.push(answer(SMOLLM2_BAD_CALL), answer("Answer: Mara Quell"))
    tools = make_tools(SPARSE)
    agent = OpenAIAgent(llm(chat.base_url), max_turns=3, text_tool_calls=setting)
    result = await agent.run(QUESTION, tools, EventLog("t"))
    assert tools.calls == [] and result.prediction == "Mara Quell" and not result.out_of_turns
    messages = chat.chat_requests[-1]["messages"]
    [asked] = [m for m in messages if m["role"] == "assistant"]
    assert asked["tool_calls"][0]["function"]["name"] == SPARSE
    [tool_message] = [m for m in messages if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == asked["tool_calls"][0]["id"]
    assert "could not be read" in tool_message["content"] and "the tool was not called" in tool_message["content"]


def test_an_unreadable_call_in_the_tool_preflight_is_no_proof_of_a_missing_parser(chat):
    chat.push(answer(ATTEMPTS["hermes"]))
    make_agent(chat.base_url).check_tools([spec(SPARSE)])
    assert len(chat.chat_requests) == 1
