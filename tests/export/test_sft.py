"""A run's conversations as SFT rows, read back as trainers read them, against what the model was sent."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

import rollout.cli
from rollout.export.cli import main
from rollout.report.scoring import summarize
from rollout.run_folder import iter_trajectory
from rollout.view.render import render_task
from tests.agents.chat_server import UNREADABLE_CALL_SAID
from tests.export.conftest import BORN, BROKEN, CODE, CUT, SPARSE_ONLY, UNREAD, load, read_jsonl, sent, unpadded

SKIPS = "1 answer cut at the token limit, 1 error"
CONTEXT = "1 out of the model's context window, 1 tool call the server could not read"
"""The task whose conversation the server refused as too long, and the one whose last reply the server lost with its
error: they end with no answer to train on."""


def export(run: Path, fmt: str, out: Path, *extra: str, capsys=None) -> str:
    assert main([str(run), "--format", fmt, "--out", str(out), *extra]) == 0
    return capsys.readouterr().out.strip() if capsys else ""


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_openai_rows_replay_the_conversation_the_model_was_sent(openai_run, tmp_path, capsys, suffix):
    out = tmp_path / f"sft{suffix}"
    line = export(openai_run.path, "openai", out, capsys=capsys)
    assert line == f"wrote 3 rows to {out} (openai); skipped 4 tasks: {SKIPS}, {CONTEXT}"
    rows = load(out)
    assert [r["messages"][1]["content"] for r in rows] == [BORN.question, CODE.question, BROKEN.question]
    born = rows[0]
    # Byte for byte: the same keys in the same order, the same values (json.dumps sees both).
    assert json.dumps(born["messages"]) == json.dumps(sent(openai_run, BORN.id))
    assert born["messages"][-1] == {"role": "assistant", "content": "Answer: Kelmor"}  # the reasoning was not sent back
    for request in openai_run.requests[BORN.id]:
        assert born["tools"] == request["tools"] and born["parallel_tool_calls"] is request["parallel_tool_calls"]
    broken = rows[2]
    assert json.dumps(broken["messages"]) == json.dumps(sent(openai_run, BROKEN.id))
    # Sent back as a JSON string of what the model wrote, which a server can parse to render its template.
    assert broken["messages"][2]["tool_calls"][0]["function"]["arguments"] == json.dumps('{"query": "Arlen Voss')
    if suffix == ".jsonl":  # the OpenAI file itself: these keys and nothing else
        assert [set(r) for r in read_jsonl(out)] == [{"messages", "tools", "parallel_tool_calls"}] * 3


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_trl_rows_hold_argument_objects_and_scores(openai_run, tmp_path, suffix):
    out = tmp_path / f"trl{suffix}"
    export(openai_run.path, "trl", out)
    born, code, broken = load(out)
    request = openai_run.requests[BORN.id][-1]
    assert born["tools"] == request["tools"]
    call = born["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"query": "Arlen Voss born", "top_k": 2}
    assert call["id"] == request["messages"][2]["tool_calls"][0]["id"]
    # Apart from the parsed arguments, the conversation the model was sent.
    as_sent = sent(openai_run, BORN.id)
    as_sent[2] = {**as_sent[2], "tool_calls": [{**as_sent[2]["tool_calls"][0], "function": call["function"]}]}
    assert json.dumps(born["messages"]) == json.dumps(as_sent)
    # Arguments the model wrote as broken JSON stay the text it wrote.
    assert broken["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"query": "Arlen Voss'
    assert broken["messages"][4]["tool_calls"][0]["function"]["arguments"] == {"query": "Arlen Voss"}
    assert [(r["id"], r["repeat"], r["exact_match"], r["f1"]) for r in (born, code, broken)] == [
        (BORN.id, 0, 1.0, 1.0), (CODE.id, 0, 0.0, 0.0), (BROKEN.id, 0, 1.0, 1.0)]


def test_verl_sft_parquet_reads_back_as_verl_reads_it(openai_run, tmp_path):
    out = tmp_path / "verl.parquet"
    export(openai_run.path, "verl-sft", out)
    # verl's MultiTurnSFTDataset reads parquet through pandas; datasets reads it too.
    frame = pd.read_parquet(out, dtype_backend="pyarrow")
    assert list(frame.columns) == ["messages", "tools", "extra_info"]
    for rows in (frame.to_dict("records"), load(out)):
        born = rows[0]
        messages = [dict(m) for m in born["messages"]]
        assert unpadded(messages, sent(openai_run, BORN.id)) == sent(openai_run, BORN.id)
        assert {k for m in messages for k in m} == {"role", "content", "tool_calls", "tool_call_id"}
        assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"query": "Arlen Voss born", "top_k": 2}'
        assert unpadded(born["tools"], openai_run.requests[BORN.id][0]["tools"]) == \
            openai_run.requests[BORN.id][0]["tools"]
        assert dict(born["extra_info"]) == {"id": BORN.id, "repeat": 0, "exact_match": 1.0, "f1": 1.0}
    jsonl = tmp_path / "verl.jsonl"
    export(openai_run.path, "verl-sft", jsonl)
    assert [set(r) for r in read_jsonl(jsonl)] == [{"messages", "tools", "extra_info"}] * 3
    assert read_jsonl(jsonl)[0]["messages"] == sent(openai_run, BORN.id)


@pytest.mark.parametrize(("options", "ids", "skipped"), [
    (["--only-correct"], [BORN.id, BROKEN.id], f"skipped 5 tasks: {SKIPS}, 1 not exact-match correct, {CONTEXT}"),
    (["--min-f1", "0.5"], [BORN.id, BROKEN.id], f"skipped 5 tasks: {SKIPS}, 1 F1 below 0.5, {CONTEXT}"),
    (["--min-f1", "0"], [BORN.id, CODE.id, BROKEN.id], f"skipped 4 tasks: {SKIPS}, {CONTEXT}"),
])
def test_filters_keep_tasks_by_the_runs_own_scores(openai_run, tmp_path, capsys, options, ids, skipped):
    out = tmp_path / "kept.jsonl"
    line = export(openai_run.path, "trl", out, *options, capsys=capsys)
    assert line == f"wrote {len(ids)} rows to {out} (trl); {skipped}"
    assert [r["id"] for r in read_jsonl(out)] == ids


def test_failed_and_cut_tasks_are_never_exported(openai_run, tmp_path):
    # The run holds them, with their conversations: the cut one answered, the failed one got no reply.
    assert openai_run.tasks[CUT.id].status == "ok" and openai_run.tasks[CUT.id].truncated
    assert openai_run.tasks["q-city"].status == "error"
    out = tmp_path / "all.jsonl"
    export(openai_run.path, "openai", out)
    asked = [r["messages"][1]["content"] for r in read_jsonl(out)]
    assert CUT.question not in asked and "In which country is Kelmor?" not in asked


def test_the_rollout_command_runs_it(openai_run, tmp_path, capsys):
    out = tmp_path / "via-cli.jsonl"
    assert rollout.cli.main(["export", str(openai_run.path), "--format", "openai", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote 3 rows to {out}")
    assert len(read_jsonl(out)) == 3


def test_a_call_the_server_could_not_read_is_scored_flagged_shown_and_never_trained_on(openai_run, tmp_path):
    task = openai_run.tasks[UNREAD.id]
    # The model's outcome with its tools working: status ok, no answer, the server's words kept, asked once.
    assert (task.status, task.prediction, task.unreadable_call, task.turns) == ("ok", "", True, 2)
    assert task.stop_message == UNREADABLE_CALL_SAID and len(openai_run.requests[UNREAD.id]) == 2
    summary = summarize(iter_trajectory(openai_run.path, full=True), mode="sparse", gateway_file=str(SPARSE_ONLY),
                        wall_time_s=1.0)
    assert summary.scored == 6  # all but the endpoint's refusal, this one among them as a wrong answer
    [warning] = [w for w in summary.warnings if "could not read" in w]
    assert warning.startswith("1 of 7 tasks ended on a tool call the model wrote that its server could not read")
    console = Console(record=True, width=200)
    render_task(console, task)  # `rollout view RUN --task q-unread`
    shown = console.export_text()
    assert "status     ok (tool call the server could not read)" in shown and "Failed to parse tool call" in shown
    out = tmp_path / "sft.jsonl"
    export(openai_run.path, "openai", out)
    assert UNREAD.question not in out.read_text()
