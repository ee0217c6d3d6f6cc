"""The SkyRL-gym environment `rollout`, made as SkyRL makes it (`skyrl_gym.make(env_class, env_config=..., extras=
row)`) from rows `rollout export --format verl-rl` wrote and SkyRL's dataset reads, stepped against a real gateway
on loopback serving a dense and a sparse retriever."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import datasets
import pytest
import skyrl_gym
from omegaconf import OmegaConf

import rollout.trainers.skyrl as skyrl_env
from rollout.errors import ConfigError, GatewayError
from rollout.export.cli import main as export_main
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.records import Passage
from rollout.retrieval import BM25Retriever, DenseRetriever, Encoder
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.skyrl import LOOP, RolloutEnv
from tests.conftest import gateway_on_loopback

PASSAGES = [
    Passage("d0", "Arlen Voss", "Arlen Voss was born in Kelmor in 1961."),
    Passage("d1", "Kelmor", "Kelmor is a city in Dravia, on the Sell river."),
    Passage("d2", "Veltrix Holdings", "Veltrix Holdings makes textile looms. Registry code ORG-5521."),
]
QUESTIONS = [
    {"id": "q-voss", "question": "Where was Arlen Voss born?", "golden_answers": ["Kelmor"]},
    {"id": "q-looms", "question": "Which company makes textile looms?", "golden_answers": ["Veltrix Holdings"]},
]
HYBRID = GATEWAYS_DIR / "rag_hybrid.json"
DENSE, SPARSE = "query_knowledge_base_dense", "query_knowledge_base_sparse"


@pytest.fixture(scope="module")
def gateway(encoder: Encoder, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The hybrid gateway file served on loopback; its ledger is run_dir/tool_stats/realtime_calls.jsonl."""
    run_dir = tmp_path_factory.mktemp("skyrl-gateway")
    dense = DenseRetriever.from_vectors(encoder.encode_passages([p.contents for p in PASSAGES]), encoder=encoder)
    kb = KnowledgeBase(PASSAGES, {"dense": dense, "sparse": BM25Retriever.build(PASSAGES)})
    with gateway_on_loopback(HYBRID, kb, run_dir) as url:
        yield url, run_dir / "tool_stats" / "realtime_calls.jsonl"


@pytest.fixture(scope="module")
def question_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("questions") / "qa.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return path


def experiment_of(question_file: Path, *more: str, mode: str = "hybrid") -> list[str]:
    """The experiment's overrides: what a run of it and the row export are given."""
    return [f"mode={mode}", "llm.model=policy", "dataset=files", f"dataset.questions.path={question_file}", *more]


def skyrl_rows(overrides: list[str], tmp_path: Path) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
    """`rollout export --questions ... --format verl-rl` rows, read back as SkyRL's PromptDataset reads them: the
    parquet through `datasets`, `prompt` and `env_class` popped, every other column an extra."""
    out = tmp_path / "rows.parquet"
    assert export_main(["--questions", *overrides, "--format", "verl-rl", "--out", str(out)]) == 0
    table = datasets.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    rows = []
    for i in range(len(table)):
        row = dict(table[i])
        prompt = row.pop("prompt")
        assert row.pop("env_class", None) is None  # so SkyRL takes environment.env_class=rollout
        rows.append((prompt, row))
    return rows


def make_env(url: str, overrides: list[str], extras: dict[str, Any], **config: Any) -> RolloutEnv:
    """As SkyRL's generator makes it: `generator.max_turns` joins the extras."""
    env_config = {"experiment": " ".join(overrides), "gateway_url": url, **config}
    env = skyrl_gym.make("rollout", env_config=env_config, extras={**extras, "max_turns": 5})
    assert isinstance(env, RolloutEnv)
    return env


def ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def loop_tasks() -> set[str]:
    """Names of the tasks left on the environments' loop: an open MCP session keeps its owner task there."""
    async def others() -> set[str]:
        return {t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    return LOOP.run(others())


def test_an_episode_searches_reads_the_information_block_and_is_rewarded_by_the_scorer(gateway, question_file,
                                                                                       tmp_path):
    url, calls = gateway
    overrides = experiment_of(question_file, "agent=search_r1")
    (prompt, extras), _ = skyrl_rows(overrides, tmp_path)
    protocol = TrainingExperiment.compose(overrides).protocol()
    assert extras["reward_model"]["ground_truth"] == {"target": ["Kelmor"]} and extras["extra_info"]["id"] == "q-voss"

    env = make_env(url, [o for o in overrides if o != "agent=search_r1"], extras)  # the default agent
    assert env.settings.overrides[0] == "agent=search_r1"
    opening, info = env.init(prompt)
    opening_text = protocol.instruction(question="Where was Arlen Voss born?")
    assert opening == prompt == [{"role": "user", "content": opening_text}]
    searched = env.step("<think>I need his birthplace.</think>\n<search> Arlen Voss born </search>")
    answered = env.step("<think>Kelmor.</think>\n<answer> Kelmor </answer>")
    assert not searched["done"] and searched["reward"] == 0.0
    [observation] = searched["observations"]
    assert observation["role"] == "user"
    assert observation["content"].startswith("\n\n<information>Doc 1(Title: Arlen Voss) Arlen Voss was born in Kelmor")
    assert observation["content"].endswith("</information>\n\n") and observation["content"].count("Doc ") == 3
    assert searched["metadata"] == {"kind": "search", "tool_name": DENSE, "ok": True,  # <search>: the first query tool
                                    "tool_input": {"query": "Arlen Voss born", "top_k": 3}}
    assert (answered["done"], answered["reward"], answered["observations"]) == (True, 1.0, [])
    assert answered["metadata"] == {"kind": "answer", "answer": "Kelmor"}
    assert env.session is None  # the answer ended the episode and its MCP session
    assert env.get_metrics() == {"turns": 2, "tool_calls": 1, "failed_tool_calls": 0, "answered": 1.0}
    env.close()  # SkyRL closes it again: nothing happens

    # The same question answered wrongly scores 0, by the configured metric; f1 gives partial credit.
    wrong = make_env(url, overrides, extras)
    wrong.init(prompt)
    assert wrong.step("<answer>Dravia</answer>")["reward"] == 0.0
    partial = make_env(url, overrides, extras, metric="f1")
    partial.init(prompt)
    assert partial.step("<answer>Kelmor town</answer>")["reward"] == pytest.approx(2 / 3)

    lines = [x for x in ledger(calls) if x["task_id"] == info["trajectory_id"]]
    assert info["trajectory_id"].startswith("q-voss-") and info["question_id"] == "q-voss"
    assert [(x["tool_name"], x["traffic"], "step" in x) for x in lines] == [(DENSE, "train", False)]
    assert loop_tasks() == set()  # every session closed


def test_two_search_tags_reach_two_tools_on_threads_as_skyrl_runs_environments(gateway, question_file, tmp_path):
    url, calls = gateway
    overrides = experiment_of(question_file, "agent=search_r1_hybrid")
    rows = skyrl_rows(overrides, tmp_path)
    # Two trajectories at once on SkyRL's env worker threads; the config as SkyRL's command line gives it.
    env_config = OmegaConf.from_cli([f"experiment={' '.join(overrides)}", f"gateway_url={url}"])

    def trajectory(prompt_extras: tuple[list[dict[str, str]], dict[str, Any]], turns: list[str]) -> list[dict]:
        prompt, extras = prompt_extras
        env = skyrl_gym.make("rollout", env_config=env_config, extras={**extras, "global_step": 7})
        env.init(prompt)
        try:
            return [env.step(t) for t in turns]
        finally:
            env.close()

    with ThreadPoolExecutor(2, thread_name_prefix="skyrl-gym-env-") as pool:
        voss = pool.submit(trajectory, rows[0], ["<search_sparse>Arlen Voss</search_sparse>",
                                                 "<search_dense>a city on a river in Dravia</search_dense>",
                                                 "<answer>Kelmor</answer>"])
        looms = pool.submit(trajectory, rows[1], ["<search_dense>who manufactures weaving machines</search_dense>",
                                                  "<answer>Veltrix Holdings</answer>"])
        voss_steps, looms_steps = voss.result(), looms.result()
    assert [s["metadata"].get("tool_name") for s in voss_steps] == [SPARSE, DENSE, None]
    assert "Doc 1(Title: Arlen Voss)" in voss_steps[0]["observations"][0]["content"]
    assert "Doc 1(Title: Kelmor)" in voss_steps[1]["observations"][0]["content"]
    assert "Doc 1(Title: Veltrix Holdings)" in looms_steps[0]["observations"][0]["content"]
    assert (voss_steps[-1]["reward"], looms_steps[-1]["reward"]) == (1.0, 1.0)
    train = [x for x in ledger(calls) if x.get("step") == 7]
    assert sorted((x["task_id"].rsplit("-", 1)[0], x["tool_name"], x["traffic"]) for x in train) == [
        ("q-looms", DENSE, "train"), ("q-voss", DENSE, "train"), ("q-voss", SPARSE, "train")]
    # One loop thread for every environment of the process, and no session left on it.
    assert [t for t in threading.enumerate() if t.name == "rollout-skyrl-env-loop"] == [LOOP.thread]
    assert loop_tasks() == set()


def test_invalid_turns_get_the_protocols_feedback_and_max_turns_ends_the_episode(gateway, question_file, tmp_path,
                                                                                  monkeypatch, caplog):
    url, calls = gateway
    monkeypatch.setattr(skyrl_env, "_WARNED", set())
    overrides = experiment_of(question_file, "agent=search_r1", "agent.max_turns=3")
    (prompt, extras), _ = skyrl_rows(overrides, tmp_path)
    env = make_env(url, overrides, extras)
    with caplog.at_level(logging.WARNING, logger="rollout.trainers.skyrl"):
        env.init(prompt)
    invalid = env.step("I think it is Kelmor.")
    searched = env.step("<search>Arlen Voss</search>")
    last = env.step("<search>Kelmor river</search>")  # the last turn: the search is not run
    assert invalid["observations"] == [{"role": "user", "content": env.protocol.invalid}]
    assert "My previous action is invalid" in env.protocol.invalid
    assert (invalid["done"], invalid["reward"], invalid["metadata"]) == (False, 0.0, {"kind": "invalid"})
    assert not searched["done"]
    assert (last["done"], last["reward"], last["observations"], last["metadata"]) == (
        True, 0.0, [], {"kind": "out_of_turns"})
    assert env.max_turns == 3 and env.get_metrics() == {"turns": 3, "tool_calls": 1, "failed_tool_calls": 0,
                                                        "answered": 0.0}
    assert [x["tool_name"] for x in ledger(calls) if x["task_id"] == env.trajectory_id] == [DENSE]
    # SkyRL's generator.max_turns (5 here) is not the experiment's: said once, naming the fix. (The steps' own
    # records, httpx's among them, reach caplog too when an earlier test of this worker left their level at INFO.)
    assert [r.getMessage() for r in caplog.records if r.name == "rollout.trainers.skyrl"] == [
        ("generator.max_turns=5, but episodes end at the experiment's agent.max_turns=3, as evaluated tasks do: "
         "set generator.max_turns=3 (or agent.max_turns in the experiment)")]


def test_bad_settings_and_rows_are_refused_naming_the_fix(gateway, question_file, tmp_path, unused_tcp_port,
                                                          monkeypatch, caplog):
    url, _ = gateway
    overrides = experiment_of(question_file, "agent=search_r1")
    # Rows of another experiment: the policy would be shown tags this one does not read. Said once.
    monkeypatch.setattr(skyrl_env, "_WARNED", set())
    (prompt, hybrid_row), _ = skyrl_rows(experiment_of(question_file, "agent=search_r1_hybrid"), tmp_path)
    with caplog.at_level(logging.WARNING, logger="rollout.trainers.skyrl"):
        for _ in range(2):
            env = make_env(url, overrides, {**hybrid_row, "max_turns": 5})
            env.init(prompt)
            env.close()
    assert [r.getMessage() for r in caplog.records] == [
        (f"the prompt of question q-voss is not the opening of experiment {' '.join(overrides)}: export the rows with "
         f"the same overrides (rollout export --questions {' '.join(overrides)} --format verl-rl --out FILE)")]
    extras = {"reward_spec": {"method": "rule", "ground_truth": {"target": ["Kelmor"]}}}  # SkyRL's own rows
    assert make_env(url, overrides, extras).golden_answers == ["Kelmor"]
    with pytest.raises(ConfigError, match="neither reward_spec.ground_truth nor reward_model.ground_truth"):
        make_env(url, overrides, {"data_source": "x"})
    with pytest.raises(ConfigError, match="unknown key.s. search_url; it takes experiment, gateway_url"):
        make_env(url, overrides, extras, search_url="http://127.0.0.1:8000/retrieve")
    with pytest.raises(ConfigError, match="reward metric 'bleu' is not one of em, f1, contains"):
        make_env(url, overrides, extras, metric="bleu")
    with pytest.raises(ConfigError, match="speaks no tag protocol"):
        make_env(url, experiment_of(question_file, "agent=openai"), extras)
    with pytest.raises(ConfigError, match="is not a search tool the gateway offers"):  # a sparse-only gateway file
        make_env(url, experiment_of(question_file, "agent=search_r1_hybrid", mode="sparse"), extras).init([])
    with pytest.raises(GatewayError, match="Is the gateway running"):
        make_env(f"http://127.0.0.1:{unused_tcp_port}/mcp", overrides, extras).init([])
    assert loop_tasks() == set()
