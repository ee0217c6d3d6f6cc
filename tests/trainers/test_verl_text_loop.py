"""Search-R1's loop in verl: the agent loop `rollout_text` run by verl 0.9.1's own rollout worker, in its venv, on
rows `rollout export` wrote, with the overrides and the agent loop config docs/trainers.md shows, against a real
gateway on the demo knowledge base; its trajectories held against what the evaluated tagged agent reads for the
same policy turns (tests/trainers/verl_text_loop_checks.py runs verl's side; a scripted server stands in for vLLM,
as no model can run here)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
from collections import defaultdict
from typing import Any

import pytest
import yaml

from envs.http_mcp_rag_env import HttpMCPRagEnv
from rollout.agents.tagged import TaggedAgent
from rollout.events import EventLog
from rollout.export.cli import main as export_main
from rollout.paths import PROJECT_ROOT
from rollout.run.gateway_process import GatewayProcess
from rollout.trainers.experiment import TrainingExperiment
from rollout.trainers.reward import compute_score
from tests.agents.chat_server import MODEL, chat_server, said
from tests.doc_pages import DOCS_DIR, split_page
from tests.trainers.test_verl import verl_commands
from tests.trainers.trainer_venvs import trainer_python

HEADING = "### Tagged-text policies (Search-R1's loop)"
EXPERIMENT = ["mode=hybrid", "agent=search_r1", "llm.model=policy", "dataset.limit=7"]
TOKEN = "verl-text-loop-token"
STEP = 3
"""The training step verl's trainer gives the batch and its rollout server reports for the weights."""
RESPONSE_LENGTH = 1024
TURN_CAP = 100
"""`llm.sampling.max_tokens` of one loop's experiment: the evaluated agent's limit per turn."""
STOP = ["</search>", "</answer>"]


def documented_loop_config() -> list[dict[str, Any]]:
    """The agent loop config the subsection shows (its one yaml block)."""
    text = (DOCS_DIR / "trainers.md").read_text(encoding="utf-8")
    (block,) = [b for b in split_page(text[text.index(HEADING):])[1] if b.info == "yaml"][:1]
    return yaml.safe_load("\n".join(line for _, line in block.lines))


def scripts(questions: list[Any]) -> dict[str, dict[str, Any]]:
    """What the policy writes for each question, turn by turn, as a model would write it before a server stops it."""
    q = [x.question for x in questions]
    gold = [x.golden_answers[0] for x in questions]
    return {
        # Right answer after a search (text past each closing tag is never generated).
        q[0]: {"turns": [f"<think>I need to search.</think>\n<search> {q[0]} </search>\n\nnever read",
                         f"<think>Found it.</think>\n<answer> {gold[0]} </answer> never read"]},
        q[1]: {"turns": [f"<search> {q[1]} </search>", "<answer> nobody at all </answer>"]},  # wrong answer
        q[2]: {"turns": [f"<search> {q[2]} {i} </search>" for i in range(1, 6)]},  # out of turns: 4 searches run
        # A turn without a tag (ended by the end-of-sequence token) gets the protocol's feedback.
        q[3]: {"turns": ["I am not sure.<|im_end|>", f"<search> {q[3]} </search>", f"<answer> {gold[3]} </answer>"]},
        q[4]: {"turns": [f"<search> {q[4]} </search>", "<think>" + " la" * 3000]},  # cut at the response budget
        # A search completing the budget's last token (not run); one whose information block does not fit (run).
        q[5]: {"turns": [f"<think>{{pad}}</think>\n<search> {q[5]} </search>"], "pad_gap": 0},
        q[6]: {"turns": [f"<think>{{pad}}</think>\n<search> {q[6]} </search>"], "pad_gap": 5},
    }


def evaluated(url: str, experiment: TrainingExperiment, turns_of: dict[str, list[str]]) -> dict[str, list[str]]:
    """The messages after the instruction, of the evaluated tagged agent (`agent=search_r1`, its protocol from the
    experiment) answering each question with the same policy turns, served as vLLM's chat server serves them: the
    text up to the stop string, which it drops."""
    def reply(text: str):
        at, stop = min((text.find(s), s) for s in [*STOP, "<|im_end|>"] if s in text)
        return said(text[:at], stop=None if stop == "<|im_end|>" else stop)  # None: at the end-of-sequence token

    async def run() -> dict[str, list[str]]:
        out = {}
        settings = {k: v for k, v in experiment.agent.items() if k not in ("_target_", "llm")}
        with chat_server() as chat:
            llm = {"base_url": chat.base_url, "model": MODEL, "api_key_env": None, "timeout_s": 10, "max_retries": 0}
            agent = TaggedAgent(llm, **settings)
            async with HttpMCPRagEnv(url, experiment.gateway_file, auth_token=TOKEN) as env:
                for question, turns in turns_of.items():
                    chat.push(*[reply(t) for t in turns])
                    events = EventLog(question)
                    result = await agent.run(question, env.for_task(f"evaluated {question}", events), events)
                    out[question] = [m["content"] for m in result.messages[1:]]
        return out

    return asyncio.run(run())


@pytest.mark.slow
def test_verl_trains_a_tagged_policy_with_searches_on_the_gateway(tmp_path):
    """One verl subprocess (its import takes seconds) beside one gateway process, started at once."""
    python = trainer_python("verl")
    (command,) = verl_commands(HEADING)
    (entry,) = documented_loop_config()
    overrides = dict(o.split("=", 1) for o in command)
    assert overrides["actor_rollout_ref.rollout.agent.default_agent_loop"] == entry["name"] == "rollout_text"
    assert entry["_target_"] == "rollout.trainers.verl_text_loop.TextAgentLoop"
    assert entry["experiment"] == "mode=hybrid agent=search_r1 llm.model=Qwen/Qwen2.5-3B-Instruct"

    experiment = TrainingExperiment.compose(EXPERIMENT)
    questions = list(experiment.questions())
    script = scripts(questions)
    parquet = tmp_path / "rl.parquet"
    assert export_main(["--questions", *EXPERIMENT, "--format", "verl-rl", "--out", str(parquet)]) == 0
    values = {"data.train_files": str(parquet), "data.val_files": str(parquet),
              "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(tmp_path / "rollout_text.yaml"),
              "actor_rollout_ref.rollout.response_length": str(RESPONSE_LENGTH)}
    protocol = experiment.protocol()
    spec = {
        "overrides": [f"{k}={values.get(k, v)}" for k, v in overrides.items()],
        "test_overrides": [f"actor_rollout_ref.model.path={tmp_path / 'model'}", "actor_rollout_ref.rollout.name=vllm"],
        "loop_config": [{**entry, "experiment": " ".join(EXPERIMENT)}],
        "turn_cap_experiment": " ".join([*EXPERIMENT, f"llm.sampling.max_tokens={TURN_CAP}"]),
        "scripts": script,
        "texts": [protocol.instruction(question=q.question) for q in questions] + [protocol.invalid or ""]
                 + [t for s in script.values() for t in s["turns"]],
        "step": STEP,
        "model_dir": str(tmp_path / "model"),
        "url_file": str(tmp_path / "gateway_url"),
        "result": str(tmp_path / "result.json"),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "ROLLOUT_GATEWAY_TOKEN": TOKEN}
    ledger_dir = tmp_path / "gateway"
    log = tmp_path / "verl.log"
    with log.open("w") as out:
        verl_side = subprocess.Popen([str(python), "-m", "tests.trainers.verl_text_loop_checks",
                                      str(tmp_path / "spec.json")], cwd=PROJECT_ROOT, env=env, stdout=out, stderr=out)
    try:
        with GatewayProcess(["--config", str(experiment.gateway_file), "--output-dir", str(ledger_dir)],
                            auth_token=TOKEN) as gateway:
            url = gateway.wait_ready()
            (tmp_path / "gateway_url").write_text(url)
            reads = evaluated(url, experiment, {q: s["turns"] for q, s in list(script.items())[:4]})
            verl_side.wait(timeout=600)
    finally:
        if verl_side.poll() is None:
            verl_side.kill()
    assert verl_side.returncode == 0, log.read_text()[-3000:]
    seen = json.loads((tmp_path / "result.json").read_text())
    assert seen["agent_loop"] == {"default": "rollout_text", "config_path": str(tmp_path / "rollout_text.yaml")}
    length = seen["response_length"]
    assert length == RESPONSE_LENGTH
    by_question = {t["question"]: t for t in seen["trajectories"]}
    q = [x.question for x in questions]
    assert list(by_question) == q  # one trajectory per exported row, in the rows' order

    # verl's prompt is the row's instruction in the model's chat template; the response is the evaluated agent's
    # conversation after it, byte for byte: the policy's turns trained (mask 1), what it read appended (mask 0).
    for question in q:
        instruction = protocol.instruction(question=question)
        assert by_question[question]["prompt"] == f"<|im_start|>user\n{instruction}<|im_end|>\n<|im_start|>assistant\n"
    for question, messages in reads.items():
        segments = by_question[question]["segments"]
        assert [s["text"] for s in segments] == messages, question
        assert [s["mask"] for s in segments] == [1, 0] * (len(messages) // 2) + [1] * (len(messages) % 2)
        assert by_question[question]["response"] == "".join(messages)
    information = reads[q[0]][1]
    assert information.startswith("\n\n<information>Doc 1(Title: ") and information.endswith("</information>\n\n")
    assert reads[q[0]][0] == f"<think>I need to search.</think>\n<search> {q[0]} </search>"
    assert reads[q[3]][:2] == ["I am not sure.", protocol.invalid]  # its end-of-sequence token is not kept
    assert len(reads[q[2]]) == 9  # five turns, four information blocks: the last turn's search is not run

    # The reward: the answer's score, on the response's last token, the number compute_score reads off the decoded
    # response; verl's reward function is not called for these trajectories (no reward extra keys).
    rewards = {question: t["reward"] for question, t in by_question.items()}
    assert rewards == {q[0]: 1.0, q[1]: 0.0, q[2]: 0.0, q[3]: 1.0, q[4]: 0.0, q[5]: 0.0, q[6]: 0.0}
    for t in seen["trajectories"]:
        assert compute_score(t["data_source"], t["response"], t["ground_truth"]) == t["reward"]
        assert t["reward_at"] == ([t["response_tokens"] - 1] if t["reward"] else [])
        assert t["mask_after_response"] == 0
        assert t["logprobs"] == ([[0, 0.0], [1, -0.25]] if len(t["segments"]) > 1 else [[1, -0.25]])
    assert seen["reward_extra_keys"] == []

    # Each turn asked for the protocol's stop strings and at most the response tokens left.
    calls = seen["calls"]
    assert {tuple(c["stop"]) for c in calls} == {tuple(STOP)}
    direct = seen["direct"]
    direct_ids = {d["request_id"] for d in direct.values() if "request_id" in d}
    request_ids = defaultdict(set)
    for c in calls:
        if c["request_id"] not in direct_ids:
            request_ids[c["question"]].add(c["request_id"])
    first = {c["request_id"]: c for c in calls if c["turn"] == 0}
    assert {c["max_tokens"] for c in first.values()} <= {length, TURN_CAP}

    # The response budget: a turn cut at it ends the trajectory unanswered; a search completing it is not run; an
    # information block that does not fit is not appended (its search ran).
    cut = by_question[q[4]]
    assert cut["response_tokens"] == length and [s["mask"] for s in cut["segments"]] == [1, 0, 1]
    (cut_call,) = [c for c in calls if c["question"] == q[4] and c["turn"] == 1]
    assert cut_call["max_tokens"] == cut_call["tokens"] == length - sum(s["tokens"] for s in cut["segments"][:2])
    assert by_question[q[5]]["response_tokens"] == length and len(by_question[q[5]]["segments"]) == 1
    assert by_question[q[5]]["segments"][0]["text"].endswith(f"<search> {q[5]} </search>")
    assert by_question[q[6]]["response_tokens"] == length - 5 and len(by_question[q[6]]["segments"]) == 1

    extra = {question: t["extra_fields"] for question, t in by_question.items()}
    assert {question: (e["turns"], e["tool_calls"], e["answered"], e["truncated"]) for question, e in extra.items()} \
        == {q[0]: (2, 1, True, False), q[1]: (2, 1, True, False), q[2]: (5, 4, False, False),
            q[3]: (3, 1, True, False), q[4]: (2, 1, False, True), q[5]: (1, 0, False, True), q[6]: (1, 1, False, True)}
    assert {question: t["num_turns"] for question, t in by_question.items()} == {
        q[0]: 4, q[1]: 4, q[2]: 10, q[3]: 6, q[4]: 4, q[5]: 2, q[6]: 2}
    for question, e in extra.items():
        assert request_ids[question] == {e["request_id"]}  # one request id per trajectory, the one verl's server saw
        assert (e["global_steps"], e["failed_tool_calls"]) == (STEP, 0)

    # The ledger: every search of training as verl's request id of its trajectory, at the step of its weights.
    lines = [json.loads(x) for x in (ledger_dir / "tool_stats" / "realtime_calls.jsonl").read_text().splitlines()]
    train = defaultdict(list)
    for line in lines:
        if line.get("traffic") == "train":
            train[line["task_id"]].append(line)
    expected = {extra[question]["request_id"]: extra[question]["tool_calls"] for question in q
                if extra[question]["tool_calls"]}
    expected |= {direct[case]["request_id"]: 1 for case in ("metric_null", "turn_cap", "stop_dropped")}
    assert {task: len(found) for task, found in train.items()} == expected
    for found in train.values():
        assert {(x["worker_id"], x.get("step"), x["outcome"], x["tool_name"]) for x in found} == {
            ("verl", STEP, "ok", "query_knowledge_base_dense")}
    # The same searches as the evaluated agent's (evaluation traffic), the same passages found.
    for question in reads:
        evaluation = [x["result_ids"] for x in lines if x["task_id"] == f"evaluated {question}"]
        assert [x["result_ids"] for x in train[extra[question]["request_id"]]] == evaluation
        assert {x.get("traffic") for x in lines if x["task_id"] == f"evaluated {question}"} == {None}

    # Loops made from other entries, as verl makes them: the metric left to verl's reward function; the experiment's
    # per-turn limit; and one-line errors naming the fix.
    assert direct["metric_null"]["reward_score"] is None
    # A server that drops the stop string's tokens: the closing tag is put back as the policy's, the same text.
    dropped = direct["stop_dropped"]
    assert (dropped["response"], dropped["reward_score"]) == (by_question[q[0]]["response"], 1.0)
    assert [(s["mask"], s["text"]) for s in dropped["segments"]] == list(zip([1, 0, 1], reads[q[0]], strict=True))
    assert {c["max_tokens"] for c in calls if c["request_id"] == direct["turn_cap"]["request_id"]} == {TURN_CAP}
    assert direct["turn_cap"]["reward_score"] == 1.0
    for case, message in [
        ("bare", "agent loop rollout_text needs its settings (experiment, gateway_url): an entry `name: rollout_text`"),
        ("unknown", "agent loop rollout_text: unknown key(s) metrik; its entry takes experiment, gateway_url"),
        ("bad_metric", "agent loop rollout_text: reward metric 'bleu' is not one of em, f1, contains, or null"),
        ("not_tagged", "speaks no tag protocol (no agent.instruction): train a text policy with agent=search_r1"),
        ("dead", "no MCP session at http://127.0.0.1:1/mcp (")]:
        error = direct[case].get("error")
        assert error is not None and message in error and "\n" not in error, (case, error)
    assert re.search(r"Start the experiment's gateway: rollout gateway --config \S+rag_hybrid\.json --port PORT",
                     direct["dead"]["error"])


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed here")
def test_the_agent_loop_without_verl_names_its_install_line():
    with pytest.raises(ImportError, match=r"needs verl: pip install verl==0\.9\.1"):
        import rollout.trainers.verl_text_loop  # noqa: F401
