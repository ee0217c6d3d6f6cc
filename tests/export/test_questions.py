"""A question set as verl RL prompt rows: the questions a run asks, opened as its agent opens them."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pandas as pd
import pytest
from rich.console import Console

from rollout.export.cli import main
from rollout.records import Question
from rollout.report.scoring import summarize
from rollout.run_folder import iter_trajectory
from rollout.trainers.reward import compute_score
from rollout.view.render import render_task
from tests.agents.chat_server import answer, tool_calls
from tests.export.agents import INSTRUCTION
from tests.export.conftest import BORN, CODE, SPARSE, SPARSE_ONLY, SYSTEM_PROMPT, make_run, openai_agent

COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
QUESTIONS = [BORN, CODE, Question("q-three", "Who makes textile looms?", ["Veltrix Holdings", "Veltrix"],
                                  {"gold_doc_ids": ["d1"]})]


@pytest.fixture
def question_set(tmp_path) -> list[str]:
    """Overrides naming a three-question file, with the system prompt the openai run of conftest.py used."""
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q.to_json()) + "\n" for q in QUESTIONS), encoding="utf-8")
    return ["dataset=files", f"dataset.questions.path={path}", f"dataset.corpus.path={tmp_path / 'corpus.jsonl'}",
            f"system_prompt='{SYSTEM_PROMPT}'", f"cache_dir={tmp_path / 'cache'}"]


def export(overrides: list[str], out: Path, *extra: str) -> int:
    return main(["--questions", *overrides, "--format", "verl-rl", "--out", str(out), *extra])


def test_prompt_rows_are_what_the_agent_first_sends_and_hold_the_gold(question_set, openai_run, tmp_path, capsys):
    out = tmp_path / "rl.parquet"
    assert export([*question_set, "agent=openai", "dataset.questions.split=train"], out) == 0
    assert capsys.readouterr().out.strip() == f"wrote 3 rows to {out} (verl-rl, dataset questions)"
    # verl's RLHFDataset reads parquet through datasets; Search-R1's scripts wrote it with pandas' types.
    frame = pd.read_parquet(out, dtype_backend="pyarrow")
    assert list(frame.columns) == COLUMNS
    rows = list(datasets.load_dataset("parquet", data_files=str(out), split="train"))
    # The same question, asked by the openai run in conftest.py: the row's prompt is that run's first request.
    assert rows[0]["prompt"] == openai_run.requests[BORN.id][0]["messages"]
    for i, (row, q) in enumerate(zip(rows, QUESTIONS, strict=True)):
        assert row["data_source"] == "questions" and row["ability"] == "fact-reasoning"
        assert row["prompt"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q.question}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": {"target": q.golden_answers}}
        assert row["extra_info"] == {"index": i, "split": "train", "id": q.id, "question": q.question,
                                     "gold_doc_ids": q.gold_doc_ids}


def test_limit_data_source_and_jsonl(question_set, tmp_path):
    out = tmp_path / "rl.jsonl"
    assert export([*question_set, "dataset.limit=2"], out, "--data-source", "searchR1_nq") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["extra_info"]["id"] for r in rows] == [BORN.id, CODE.id]
    assert {r["data_source"] for r in rows} == {"searchR1_nq"} and list(rows[0]) == COLUMNS


def test_a_dataset_config_needs_no_corpus_for_its_prompts(tmp_path):
    questions = tmp_path / "nq-train.jsonl"
    questions.write_text(json.dumps(BORN.to_json()) + "\n", encoding="utf-8")
    out = tmp_path / "nq.jsonl"
    # conf/dataset/nq.yaml leaves dataset.corpus.path to fill in (???): a run needs it, prompts do not.
    assert export(["dataset=nq", f"dataset.questions.path={questions}"], out) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["data_source"] == "nq" and row["reward_model"]["ground_truth"]["target"] == BORN.golden_answers


def test_the_demo_dataset_by_default(tmp_path):
    out = tmp_path / "demo.parquet"
    small = ["dataset.n_passages=200", "dataset.n_questions=12", f"cache_dir={tmp_path / 'cache'}", "mode=sparse"]
    assert export(small, out) == 0
    questions = [json.loads(line) for line in next((tmp_path / "cache").rglob("questions.jsonl")).read_text().splitlines()]
    rows = pd.read_parquet(out).to_dict("records")
    assert len(rows) == 12 and rows[0]["data_source"] == "demo"
    assert [r["reward_model"]["ground_truth"]["target"].tolist() for r in rows] == [q["golden_answers"] for q in questions]
    assert "query_knowledge_base_sparse" in rows[0]["prompt"][0]["content"]  # the sparse mode's system prompt


def test_an_agent_that_opens_its_own_way_builds_the_prompt_or_is_refused(question_set, tmp_path, capsys):
    out = tmp_path / "tagged.jsonl"
    own = "agent._target_=tests.export.agents.OpeningAgent"
    assert export([*question_set, "agent=simulated", own], out) == 0
    first = json.loads(out.read_text().splitlines()[0])
    assert first["prompt"] == [{"role": "user", "content": INSTRUCTION + BORN.question}]
    capsys.readouterr()
    silent = "agent._target_=tests.export.agents.SilentAgent"
    assert export([*question_set, "agent=simulated", silent], tmp_path / "silent.jsonl") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "opening_messages" in err and "SilentAgent" in err


def test_search_r1_prompts_are_search_r1_s_own_rows(question_set, tmp_path):
    out = tmp_path / "search_r1.jsonl"
    assert export([*question_set, "agent=search_r1", "llm.model=m", "dataset.limit=1"], out,
                  "--data-source", "searchR1_nq") == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    # nq_search.py's row: the 'base' prefix with the question as the one user message, then the gold answers.
    [message] = row["prompt"]
    assert message["role"] == "user" and message["content"].startswith("Answer the given question. You must conduct")
    assert message["content"].endswith(f"Question: {BORN.question}\n")
    assert row["ability"] == "fact-reasoning" and row["reward_model"]["ground_truth"]["target"] == BORN.golden_answers


def test_an_answer_tag_run_asks_and_scores_as_its_exported_prompts_and_the_reward_do(question_set, chat, tmp_path,
                                                                                    capsys):
    # Two tasks on a real worker and gateway with agent.answer_tag=answer: one answer tagged, one not.
    tagged, untagged = "It is the city in the first passage. <answer> Kelmor </answer>", "Veltrix Holdings"
    made = make_run(tmp_path / "tagged", chat, SPARSE_ONLY, openai_agent(chat.base_url, answer_tag="answer"), [
        (BORN, [tool_calls((SPARSE, {"query": "Arlen Voss born"})), answer(tagged)]),
        (CODE, [answer(untagged)]),
    ])
    out = tmp_path / "rl.jsonl"
    assert export([*question_set, "agent=openai", "agent.answer_tag=answer"], out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # The exported prompt is the run's first request, whose system prompt asks for the tag.
    assert rows[0]["prompt"] == made.requests[BORN.id][0]["messages"]
    assert rows[0]["prompt"][0]["content"] == f"{SYSTEM_PROMPT}\n\nGive your final answer inside <answer> and </answer>."
    born, code = made.tasks[BORN.id], made.tasks[CODE.id]
    assert (born.status, born.prediction, born.no_answer_tag) == ("ok", "Kelmor", False)
    assert (code.status, code.prediction, code.no_answer_tag) == ("ok", "", True)
    assert [born.messages[-1]["content"], code.messages[-1]["content"]] == [tagged, untagged]  # kept as written
    # Scored as verl's reward scores the same final texts, the untagged one counted in the warnings.
    summary = summarize(iter_trajectory(made.path, full=True), mode="sparse", gateway_file=str(SPARSE_ONLY),
                        wall_time_s=1.0)
    rewards = [compute_score("questions", text, rows[i]["reward_model"]["ground_truth"])
               for i, text in enumerate([tagged, untagged])]
    assert rewards == [1.0, 0.0] and summary.metrics["exact_match"] == 0.5
    [warning] = summary.warnings
    assert warning.startswith("1 of 2 tasks ended with no complete answer tag in the final message")
    console = Console(record=True, width=200)
    render_task(console, code)  # `rollout view RUN --task q-code`
    assert "status     ok (no answer tag)" in console.export_text()
    # An agent that cannot honour the setting is refused here as a run refuses it, in one line naming the fix.
    capsys.readouterr()
    assert export([*question_set, "agent=heuristic", "agent.answer_tag=answer"], tmp_path / "refused.jsonl") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "agent=heuristic cannot honour agent.answer_tag" in err and "agent=openai" in err
