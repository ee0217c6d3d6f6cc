"""`agent=openai agent.answer_tag=answer` against the scripted chat server: the prediction is the content of the final
message's last `<answer>…</answer>`, read as verl's reward reads it, and the system prompt asks for the tag."""

from __future__ import annotations

from typing import Any

import pytest
from hydra.utils import instantiate

from rollout.agents.openai_agent import OpenAIAgent
from rollout.errors import ConfigError
from rollout.events import EventLog
from rollout.run.config import compose_run_config
from rollout.run.prepare import check_agent
from rollout.trainers.reward import METRICS, compute_score
from tests.agents.chat_server import answer, tool_calls
from tests.agents.conftest import SPARSE
from tests.agents.test_openai_agent import QUESTION, llm

GOLD = ["Kelmor"]
INSTRUCTION = "Give your final answer inside <answer> and </answer>."


def make_agent(base_url: str, *, max_turns: int = 4, **settings: Any) -> OpenAIAgent:
    return OpenAIAgent(llm(base_url), max_turns=max_turns, backoff_base_s=0.001, backoff_max_s=0.01,
                       retry_after_max_s=0.05, **settings)


async def test_a_tagged_answer_is_scored_on_its_content_and_the_prompt_asks_for_the_tag(chat, make_tools):
    final = "<think>The first passage names it.</think>The passage says so. <answer> Kelmor </answer>"
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss born"})), answer(final))
    tools = make_tools(SPARSE)
    result = await make_agent(chat.base_url, answer_tag="answer").run(QUESTION, tools, EventLog("t"))
    assert (result.prediction, result.no_answer_tag, result.out_of_turns) == ("Kelmor", False, False)
    # Every request's system prompt is the mode's, then a blank line and the sentence asking for the tag.
    assert {r["messages"][0]["content"] for r in chat.chat_requests} == {f"{tools.system_prompt}\n\n{INSTRUCTION}"}
    # The final message stays as the model wrote it (its thinking apart, as always): only the prediction changes.
    assert result.messages[-1] == {"role": "assistant", "content": "The passage says so. <answer> Kelmor </answer>"}

    # Without the setting the same reply is answered whole, tags and all, and the prompt is the mode's.
    chat.reset()
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss born"})), answer(final))
    plain = await make_agent(chat.base_url).run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert plain.prediction == "The passage says so. <answer> Kelmor </answer>" and not plain.no_answer_tag
    assert chat.chat_requests[0]["messages"][0]["content"] == tools.system_prompt


@pytest.mark.parametrize("final", ["Kelmor", "Answer: Kelmor", "<answer> Kelmor", "Kelmor </answer>",
                                   "<Answer>Kelmor</Answer>"])
async def test_a_final_message_without_a_complete_tag_is_answered_empty_and_flagged(chat, make_tools, final):
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss born"})), answer(final))
    result = await make_agent(chat.base_url, answer_tag="answer").run(QUESTION, make_tools(SPARSE), EventLog("t"))
    assert (result.prediction, result.no_answer_tag, result.out_of_turns) == ("", True, False)
    assert result.messages[-1] == {"role": "assistant", "content": final}


async def test_a_last_reply_that_only_calls_a_tool_is_out_of_turns_not_untagged(chat, make_tools):
    chat.push(tool_calls((SPARSE, {"query": "Arlen Voss"})), tool_calls((SPARSE, {"query": "Arlen Voss born"})))
    result = await make_agent(chat.base_url, max_turns=2, answer_tag="answer").run(QUESTION, make_tools(SPARSE),
                                                                                   EventLog("t"))
    assert (result.prediction, result.out_of_turns, result.no_answer_tag) == ("", True, False)


async def test_a_tag_of_another_name_is_read_and_asked_for(chat, make_tools):
    chat.push(answer("<answer>Dravia</answer> <final> Kelmor </final>"))
    tools = make_tools()
    result = await make_agent(chat.base_url, answer_tag="final").run(QUESTION, tools, EventLog("t"))
    assert result.prediction == "Kelmor"
    assert chat.chat_requests[0]["messages"][0]["content"].endswith("Give your final answer inside <final> and </final>.")


TEXTS = [
    "<answer> Kelmor </answer>",
    "First <answer>Dravia</answer>, then on reflection <answer>Kelmor</answer>.",
    "<think>It is <answer>Kelmor</answer>.</think>",  # a tag only in the thinking: the reward reads it, so do we
    "<think>Maybe <answer>Dravia</answer>?</think> <answer> kelmor. </answer>",
    "<answer> Kelmor city </answer>",
    "<answer></answer>",
    "Kelmor",
    "<answer> Kelmor",
    "Kelmor </answer> <answer>",
]


@pytest.mark.parametrize("final", TEXTS)
async def test_the_evaluation_scores_a_final_text_as_the_training_reward_does(chat, make_tools, final):
    # The same text as verl's reward reads it (compute_score) and as the evaluated agent ends its task with it.
    chat.push(answer(final))
    result = await make_agent(chat.base_url, answer_tag="answer").run(QUESTION, make_tools(), EventLog("t"))
    for metric, evaluation_metric in METRICS.items():
        reward = compute_score("questions", final, {"target": GOLD}, metric=metric)
        assert evaluation_metric(result.prediction, GOLD) == reward, (metric, result.prediction)


@pytest.mark.parametrize("value", ["<answer>", "two words", 3, ""])
def test_an_answer_tag_that_is_no_tag_name_is_refused(value):
    with pytest.raises(ConfigError, match="agent.answer_tag=.* must be a tag name such as answer"):
        make_agent("http://127.0.0.1:8000/v1", answer_tag=value)


@pytest.mark.parametrize(("agent", "named"), [
    ("heuristic", "agent=heuristic"), ("simulated", "agent=simulated"), ("search_r1", "agent.answer.open"),
    ("r1_searcher", "agent.answer.open"), ("tagged", "agent.answer.open"),
])
def test_agents_that_cannot_honour_an_answer_tag_refuse_it_naming_the_fix(agent, named):
    cfg = compose_run_config(f"agent={agent}", "agent.answer_tag=answer", "llm.model=m")
    with pytest.raises(ConfigError, match="cannot honour agent.answer_tag='answer'") as refused:
        check_agent(cfg.agent)  # as the driver builds the agent, before the run starts
    assert named in str(refused.value) and "drop it, or use agent=openai" in str(refused.value)
    assert instantiate(compose_run_config(f"agent={agent}", "llm.model=m").agent)  # unset, it builds as before
