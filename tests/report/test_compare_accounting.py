"""Accounting in `report compare`: the cost columns, the context change against the baseline, the costs figure.

Two hand-built runs of four questions, every task alike within a run, all answered right:
- dense (baseline): one dense search (200 ms, 500 context tokens); the agent's LLM 1.0 s and 1,000 tokens; 2.0 s.
- sparse: one sparse search (100 ms, 300 context tokens) and a filter (50 ms, no context, its own LLM 100 + 20
  tokens); the agent's LLM 0.5 s and 600 tokens; 1.0 s. Same EM, 40% fewer context tokens.
"""

from __future__ import annotations

import csv
import json

import matplotlib.pyplot as plt
import pytest

from rollout.accounting import CallAccounting
from rollout.events import LLMOutputEvent
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.compare.comparison import compare_runs
from rollout.report.compare.cost_plot import NO_ACCOUNTING, draw_stack, time_stack, token_stack
from rollout.report.compare.tables import (
    COMPARISON_COSTS_PNG,
    COMPARISON_CSV,
    COMPARISON_JSON,
    COMPARISON_MD,
    COMPARISON_PNG,
    comparison_tables,
    pair_sentence,
    write_comparison,
)
from tests.report.runs import DENSE, SPARSE
from tests.report.test_cli import cli
from tests.report.test_compare import dense_tasks, make

FILTER = "filter_passages"


def call(name: str, latency_ms: float, cost: CallAccounting) -> ToolCallRecord:
    return ToolCallRecord(call_id=f"{name}-{latency_ms}", name=name, arguments={"query": "q"}, ok=True, outcome="ok",
                          error=None, started=0.0, latency_ms=latency_ms, result_ids=[], result_doc_ids=[],
                          reached_gateway=True, accounting=cost)


def line(i: int, calls: list[ToolCallRecord], *, llm_ms: float, agent_tokens: int, latency_s: float) -> dict:
    return TaskResult.answered(
        Question(f"t{i}", f"question {i}", [f"Answer {i}"]), prediction=f"answer {i}", turns=2, messages=[],
        usage={"total_tokens": agent_tokens}, calls=calls, events=[LLMOutputEvent(t=0.0, turn=1, latency_ms=llm_ms)],
        worker_id="w0", latency_s=latency_s,
    ).to_json()


def dense_run() -> list[dict]:
    return [line(i, [call(DENSE, 200.0, CallAccounting("retrieval", 500))], llm_ms=1000.0, agent_tokens=1000,
                 latency_s=2.0) for i in range(4)]


def sparse_run() -> list[dict]:
    calls = [call(SPARSE, 100.0, CallAccounting("retrieval", 300)),
             call(FILTER, 50.0, CallAccounting("filtering", 0, 100, 20, 40.0))]
    return [line(i, calls, llm_ms=500.0, agent_tokens=600, latency_s=1.0) for i in range(4)]


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "results" / "demo"
    return make(root, "a_dense", "dense", dense_run()), make(root, "b_sparse", "sparse", sparse_run())


def per_mode(c) -> dict[str, dict[str, str]]:
    (_, headers, rows), *_ = comparison_tables(c)
    return {row[0]: dict(zip(headers, row, strict=True)) for row in rows}


def test_the_per_mode_table_has_the_cost_columns_and_the_context_change(runs):
    c = compare_runs(runs)
    table = per_mode(c)
    assert list(table["dense"])[-7:] == ["tokens/task", "context tokens/task", "context vs dense", "agent tokens/task",
                                         "tool LLM tokens/task", "LLM s/task", "tool s/task"]
    costs = ["EM", "context tokens/task", "context vs dense", "agent tokens/task", "tool LLM tokens/task",
             "LLM s/task", "tool s/task"]
    assert [table["dense"][k] for k in costs] == ["1.000", "500.0", "+0%", "1000.0", "0.0", "1.000", "0.200"]
    assert [table["sparse"][k] for k in costs] == ["1.000", "300.0", "-40%", "600.0", "120.0", "0.500", "0.150"]
    dense, sparse = c.rows
    assert c.context_change(sparse) == pytest.approx(-0.4) and c.context_change(dense) == 0.0
    (p,) = c.pairs
    assert p.context_change == pytest.approx(-0.4)
    assert pair_sentence(p).startswith("sparse vs dense: EM +0.000 [95% CI +0.000, +0.000] on 4 shared questions")
    assert "; context tokens per task -40%" in pair_sentence(p)


def test_the_figure_stacks_time_and_tokens_per_run(runs):
    c = compare_runs(runs)
    time = time_stack(c)
    assert time.runs == ["dense", "sparse"]
    assert time.parts == {"LLM": [1.0, 0.5], FILTER: [0.0, 0.05], DENSE: [0.2, 0.0], SPARSE: [0.0, 0.1],
                          "waiting": [0.8, 0.35]}  # tools by name, between the agent's LLM and waiting
    assert time.heights == pytest.approx([2.0, 1.0]) and time.notes == ["wall 2 s", "wall 1 s"]
    tokens = token_stack(c)
    # Stages no run used (chunking, generation, other) are left out; filtering is the filter's own LLM tokens.
    assert tokens.parts == {"retrieval": [500.0, 300.0], "filtering": [0.0, 120.0], "agent": [1000.0, 600.0]}
    assert tokens.notes == ["1,500", "1,020"]
    fig, ax = plt.subplots()
    try:
        draw_stack(ax, tokens, ylabel="tokens", title="t")
        heights = [[bar.get_height() for bar in bars] for bars in ax.containers]
        bottoms = [[bar.get_y() for bar in bars] for bars in ax.containers]
    finally:
        plt.close(fig)
    assert heights == [[500.0, 300.0], [0.0, 120.0], [1000.0, 600.0]]
    assert bottoms == [[0.0, 0.0], [500.0, 300.0], [500.0, 420.0]]  # each part sits on the ones below


def test_files_carry_the_costs_and_the_costs_figure_is_written(runs, tmp_path):
    out = tmp_path / "out"
    written = write_comparison(compare_runs(runs), out)
    assert [p.name for p in written] == [COMPARISON_MD, COMPARISON_PNG, COMPARISON_COSTS_PNG, COMPARISON_JSON,
                                         COMPARISON_CSV]
    png = (out / COMPARISON_COSTS_PNG).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    md = (out / COMPARISON_MD).read_text()
    assert f"![where a task's time and tokens go]({COMPARISON_COSTS_PNG})" in md
    assert "| sparse | 4 | 4 | 1.000 |" in md and "| 300.0 | -40% | 600.0 | 120.0 | 0.500 | 0.150 |" in md
    data = json.loads((out / COMPARISON_JSON).read_text())
    sparse = data["runs"][1]
    assert sparse["context_tokens_per_task"] == 300.0 and sparse["context_change"] == pytest.approx(-0.4)
    assert sparse["accounting"]["tools"][FILTER]["llm_tokens_per_call"] == 120.0
    assert data["pairs"][0]["context_change"] == pytest.approx(-0.4)
    rows = list(csv.DictReader((out / COMPARISON_CSV).open()))
    assert [(r["label"], r["context_tokens_per_task"], r["agent_tokens_per_task"], r["tool_s_per_task"])
            for r in rows] == [("dense", "500.0", "1000.0", "0.2"), ("sparse", "300.0", "600.0", "0.15")]
    assert float(rows[1]["context_change"]) == pytest.approx(-0.4)


def test_a_run_without_accounting_shows_dashes_and_the_others_still_compare(tmp_path):
    old = make(tmp_path, "old", "hybrid", dense_tasks())  # lines written before accounting
    c = compare_runs([old, make(tmp_path, "new", "sparse", sparse_run())])
    table = per_mode(c)
    assert (table["hybrid"]["context tokens/task"], table["hybrid"]["context vs hybrid"]) == ("-", "-")
    assert (table["sparse"]["context tokens/task"], table["sparse"]["context vs hybrid"]) == ("300.0", "-")
    assert c.pairs[0].context_change is None and "context tokens" not in pair_sentence(c.pairs[0])
    assert time_stack(c).notes[0] == NO_ACCOUNTING and time_stack(c).parts["LLM"] == [0.0, 0.5]


def test_without_accounting_anywhere_nothing_changes_and_a_stale_costs_figure_goes(tmp_path):
    runs = [make(tmp_path, "a", "dense", dense_tasks()), make(tmp_path, "b", "hybrid", dense_tasks())]
    c = compare_runs(runs)
    assert list(per_mode(c)["dense"])[-1] == "tokens/task"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / COMPARISON_COSTS_PNG).write_bytes(b"of another comparison")
    written = write_comparison(c, tmp_path / "out")
    assert COMPARISON_COSTS_PNG not in [p.name for p in written]
    assert not (tmp_path / "out" / COMPARISON_COSTS_PNG).exists()
    assert COMPARISON_COSTS_PNG not in (tmp_path / "out" / COMPARISON_MD).read_text()


def test_cli_prints_the_cost_columns(runs, tmp_path):
    r = cli("compare", *runs, "--out", tmp_path / "cmp")
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "context vs dense" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")][-6:] == [
        "context tokens/task", "context vs dense", "agent tokens/task", "tool LLM tokens/task", "LLM s/task",
        "tool s/task"]
    assert f"Wrote: {(tmp_path / 'cmp' / COMPARISON_COSTS_PNG).resolve()}" in r.stdout
