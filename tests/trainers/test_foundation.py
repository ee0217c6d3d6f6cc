"""The pieces every trainer adapter stands on: the experiment, the reward, a trajectory's tool session and the text
episode, against a real gateway on loopback."""

import json

import numpy as np
import pytest

from rollout.errors import ConfigError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.records import Passage
from rollout.retrieval import BM25Retriever
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.reward import compute_score, golden_answers, last_answer, score
from rollout.trainers.text_episode import TextEpisode
from rollout.trainers.tool_session import GatewayTarget, ToolSession
from tests.conftest import gateway_on_loopback

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Kelmor", "Kelmor is a city in Dravia."),
    Passage("d2", "Veltrix Holdings", "Veltrix Holdings makes textile looms."),
]
SPARSE = GATEWAYS_DIR / "rag_sparse_only.json"


def test_reward_is_the_evaluation_metric_of_the_last_answer():
    assert last_answer("For example, <answer> Beijing </answer>. <search>x</search> <answer> Kelmor </answer>") == "Kelmor"
    assert last_answer("<answer>unclosed") is None
    # verl-rl rows read back from parquet hold the answers as a numpy array
    truth = {"target": np.array(["Kelmor", "Kelmor City"])}
    assert golden_answers(truth) == ["Kelmor", "Kelmor City"]
    assert compute_score("demo", "<answer> the Kelmor </answer>", truth) == 1.0
    assert compute_score("demo", "no answer tag: Kelmor", truth) == 0.0
    assert compute_score("demo", "<answer>Kelmor town</answer>", truth, metric="f1") == pytest.approx(2 / 3)
    assert compute_score("demo", "[[Kelmor]]", "Kelmor", answer_open="[[", answer_close="]]") == 1.0
    assert score("in Kelmor", ["Kelmor"], "contains") == 1.0
    with pytest.raises(ConfigError, match="not one of em, f1, contains"):
        score("x", ["x"], "bleu")
    with pytest.raises(ConfigError, match="verl-rl"):
        golden_answers({"answers": ["x"]})


def test_experiment_is_named_by_the_runs_overrides():
    exp = TrainingExperiment.compose(["mode=sparse", "agent=search_r1", "llm.model=m", "dataset.limit=3"])
    assert exp.gateway_file.is_absolute() and exp.gateway_file.name == "rag_sparse_only.json"
    assert (exp.top_k, exp.max_turns) == (3, 5)
    assert [q.id for q in exp.questions()] == ["q-000000", "q-000001", "q-000002"]
    assert exp.question(question_id="q-000002").id == "q-000002"
    assert exp.protocol().searches[0].open == "<search>"
    with pytest.raises(ConfigError, match="out of range: this experiment has 3"):
        exp.question(index=3)
    with pytest.raises(ConfigError, match="speaks no tag protocol"):
        TrainingExperiment.compose(["mode=sparse"]).protocol()
    with pytest.raises(ConfigError, match="mode"):
        TrainingExperiment.compose(["mode=nonexistent"])
    # An episode ends with its answer tool or its protocol's answer: an evaluation's answer tag cannot be honoured.
    with pytest.raises(ConfigError, match="agent.answer_tag='answer' .* cannot be honoured: drop it"):
        TrainingExperiment.compose(["mode=sparse", "agent=openai", "agent.answer_tag=answer"])


async def test_text_episode_steps_the_protocol_on_the_gateway_and_marks_training_calls(tmp_path):
    kb = KnowledgeBase(PASSAGES, {"sparse": BM25Retriever.build(PASSAGES)})
    exp = TrainingExperiment.compose(["mode=sparse", "agent=search_r1", "llm.model=m"])
    protocol = exp.protocol()
    with gateway_on_loopback(SPARSE, kb, tmp_path) as url:
        async with ToolSession(GatewayTarget(url, SPARSE), "traj-1", step=4) as tools:
            routes = protocol.routes(tools.tool_specs, exp.top_k)
            episode = TextEpisode(protocol, routes, tools, ["Kelmor"], top_k=exp.top_k, max_turns=3)
            assert "Question: Where was Arlen Voss born?" in episode.opening("Where was Arlen Voss born?")
            # the server dropped the stop string: the closing tag is put back, the search runs
            searched = await episode.step("<think>find him</think><search> Arlen Voss born")
            invalid = await episode.step("I am not sure.")
            answered = await episode.step("<answer> Kelmor </answer> trailing text")
        async with ToolSession(GatewayTarget(url, SPARSE), "traj-2") as tools:
            short = TextEpisode(protocol, routes, tools, ["Kelmor"], top_k=1, max_turns=1)
            last = await short.step("<search>Arlen Voss</search>")
    assert searched.kind == "search" and not searched.done and searched.text.endswith("</search>")
    assert searched.observation.startswith("\n\n<information>Doc 1(Title: Arlen Voss) Arlen Voss was born")
    assert searched.tool_call == {"name": "query_knowledge_base_sparse",
                                  "arguments": {"query": "Arlen Voss born", "top_k": 3}, "ok": True}
    assert invalid.kind == "invalid" and "My previous action is invalid" in invalid.observation
    assert (answered.kind, answered.done, answered.reward, answered.text) == ("answer", True, 1.0,
                                                                            "<answer> Kelmor </answer>")
    assert (last.kind, last.done, last.reward) == ("out_of_turns", True, 0.0)  # a last-turn search is not run
    with pytest.raises(RuntimeError, match="episode has ended"):
        await episode.step("<answer>again</answer>")
    lines = [json.loads(x) for x in (tmp_path / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    assert [(x["task_id"], x["traffic"], x.get("step")) for x in lines] == [("traj-1", "train", 4)]
