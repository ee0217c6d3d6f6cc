"""`rollout report tool-stats PATH --by step|time`: tool use per trainer step or time window, numbers known by hand.

Ledgers are written line by line here (a gateway's --output-dir: a ledger and no trajectory), but for the last
test, whose calls go through a real gateway over MCP as a trainer's environment sends them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from envs import HttpMCPRagEnv
from rollout.errors import ReportError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.gateway_file import GATEWAYS_DIR
from rollout.report.cli import main
from rollout.report.tool_calls.use import build_tool_use
from rollout.report.tool_calls.windows import parse_window
from rollout.retrieval.cache import load_or_build_indexes
from rollout.wire import TRAFFIC_TRAIN
from tests.conftest import gateway_on_loopback
from tests.gateway.loopback import PASSAGES
from tests.report.runs import DENSE, GATEWAY_CALLS, SPARSE, TASKS, gw, make_run, write_jsonl


def train(line: dict, step: int | None) -> dict:
    """`line` as a trainer's call: marked train, with its step when it has one."""
    return {**line, "traffic": TRAFFIC_TRAIN, **({"step": step} if step is not None else {})}


# Step 1: dense ×3 (one refused), sparse ×1; step 2: sparse ×2; no step 3; step 4: dense ×1. One trainer call without
# a step, and one evaluation call (no traffic mark, no step). Times from 1000 s: 60 s windows hold 5, 2, 1 and 1.
LEDGER = [
    train(gw("a1", DENSE, "t1", None, 10.0, 1000.0, ids=["p1", "p2", "p3"]), 1),
    train(gw("a2", DENSE, "t2", None, 20.0, 1010.0, ids=["p1", "p2", "p3", "p4", "p5"]), 1),
    train(gw("a3", SPARSE, "t3", None, 4.0, 1020.0, ids=["p1", "p2"]), 1),
    train(gw("a4", DENSE, "t4", None, 1.0, 1030.0, ok=False, outcome="invalid_arguments"), 1),
    train(gw("n1", SPARSE, "t5", None, 3.0, 1059.9, ids=["p9"]), None),
    train(gw("b1", SPARSE, "t6", None, 6.0, 1065.0, ids=["p1", "p2", "p3", "p4"]), 2),
    train(gw("b2", SPARSE, "t7", None, 8.0, 1070.0, ids=["p5", "p6", "p7", "p8"]), 2),
    gw("e1", DENSE, "q1", "w0", 5.0, 1130.0, ids=["p1"]),
    train(gw("d1", DENSE, "t8", None, 2.0, 1200.0, ids=["p4"]), 4),
]


@pytest.fixture
def ledger(tmp_path):
    """A gateway's --output-dir after a training run: tool_stats/realtime_calls.jsonl and nothing else."""
    write_jsonl(tmp_path / "out" / "tool_stats" / "realtime_calls.jsonl", LEDGER)
    return tmp_path / "out"


def rows(table: pd.DataFrame, key: str) -> dict:
    return {r[key]: r for r in table.to_dict("records")}


def tool_rows(use) -> dict:
    return {(r["window"], r["tool_name"]): r for r in use.tools.to_dict("records")}


def test_by_step_counts_shares_depth_latency_and_errors_per_step_and_tool(ledger):
    use = build_tool_use(ledger, "step")
    windows = rows(use.windows, "window")
    assert list(windows) == ["1", "2", "4"]  # no call carried step 3: no row
    assert [windows[w]["calls"] for w in windows] == [4, 2, 1]
    one = windows["1"]
    assert (one["share_" + DENSE], one["share_" + SPARSE]) == (0.75, 0.25)
    assert one["mean_returned"] == round((3 + 5 + 2) / 3, 3)  # over the 3 successful calls
    assert (one["failed_calls"], one["error_share"]) == (1, 0.25)
    tools = tool_rows(use)
    dense = tools[("1", DENSE)]
    assert (dense["calls"], dense["window_calls"], dense["share"], dense["failed_calls"]) == (3, 4, 0.75, 1)
    assert dense["error_share"] == round(1 / 3, 6) and dense["mean_returned"] == 4.0
    p50, p95 = np.percentile([10.0, 20.0, 1.0], [50, 95], method="linear")
    assert (dense["p50_ms"], dense["p95_ms"]) == (pytest.approx(p50), pytest.approx(p95))
    assert tools[("1", SPARSE)]["mean_returned"] == 2.0
    # A tool the policy did not call in a step is there with 0 calls, as 0% of them.
    idle = tools[("2", DENSE)]
    assert (idle["calls"], idle["share"], idle["failed_calls"]) == (0, 0.0, 0)
    assert idle["mean_returned"] is None or pd.isna(idle["mean_returned"])
    assert tools[("2", SPARSE)]["share"] == 1.0 and tools[("2", SPARSE)]["mean_returned"] == 4.0
    assert (windows["4"]["step"], windows["4"]["last_step"]) == (4, 4)
    s = use.summary
    assert (s["ledger_calls"], s["counted_calls"], s["placed_calls"], s["unplaced_calls"]) == (9, 9, 7, 2)
    assert s["calls_by_traffic"] == {"eval": 1, "train": 8}
    assert (s["first_step"], s["windows"], s["tools"], s["has_trajectory"]) == (1, 3, [DENSE, SPARSE], False)


def test_steps_are_windowed_from_the_lowest_step(ledger):
    use = build_tool_use(ledger, "step", "2")
    windows = rows(use.windows, "window")
    assert list(windows) == ["1-2", "3-4"]
    assert [(w["step"], w["last_step"], w["calls"]) for w in windows.values()] == [(1, 2, 6), (3, 4, 1)]
    assert (windows["1-2"]["share_" + DENSE], windows["1-2"]["share_" + SPARSE]) == (0.5, 0.5)
    assert windows["3-4"]["share_" + DENSE] == 1.0


def test_by_time_cuts_windows_from_the_first_call_and_counts_calls_without_a_step(ledger):
    use = build_tool_use(ledger, "time", "1m")
    windows = rows(use.windows, "window")
    assert list(windows) == ["0s-1m", "1m-2m", "2m-3m", "3m-4m"]
    assert [w["calls"] for w in windows.values()] == [5, 2, 1, 1]  # 59.9 s is in the first; 60 s starts the second
    assert [(w["start_s"], w["end_s"]) for w in windows.values()][:2] == [(0.0, 60.0), (60.0, 120.0)]
    assert use.summary["unplaced_calls"] == 0 and use.summary["first_call_at"] == 1000.0
    train = build_tool_use(ledger, "time", "60", traffic="train")
    # The evaluation's call was the only one in [120, 180): that window has no row.
    assert rows(train.windows, "window").keys() == {"0s-1m", "1m-2m", "3m-4m"}
    assert (train.summary["counted_calls"], train.summary["traffic"]) == (8, "train")


def test_traffic_counts_a_trainers_calls_or_an_evaluations(ledger):
    train = build_tool_use(ledger, "step", traffic="train")
    assert (train.summary["counted_calls"], train.summary["placed_calls"], train.summary["unplaced_calls"]) == (8, 7, 1)
    with pytest.raises(ReportError, match=r"none of its 1 counted calls carries a step; .*--by time"):
        build_tool_use(ledger, "step", traffic="eval")
    evaluation = build_tool_use(ledger, "time", traffic="eval")
    assert evaluation.windows["calls"].tolist() == [1] and evaluation.tool_names == [DENSE]
    write_jsonl(ledger / "tool_stats" / "realtime_calls.jsonl", [c for c in LEDGER if c["call_id"] != "e1"])
    with pytest.raises(ReportError, match=r"none of its 8 calls is eval traffic \(8 train\); pass --traffic all"):
        build_tool_use(ledger, "step", traffic="eval")


@pytest.mark.parametrize(("by", "text", "size"), [("step", None, 1), ("step", "10", 10), ("time", None, 60.0),
                                                  ("time", "90", 90.0), ("time", "2.5m", 150.0), ("time", "1h", 3600.0)])
def test_window_sizes(by, text, size):
    assert parse_window(by, text).size == size


@pytest.mark.parametrize(("by", "text"), [("step", "0"), ("step", "5m"), ("step", "1.5"), ("time", "0s"),
                                          ("time", "5 minutes"), ("time", "-1")])
def test_a_window_that_cannot_be_read_is_an_error_naming_the_form(by, text):
    with pytest.raises(ReportError, match=rf"--window {text}: with --by {by} give"):
        parse_window(by, text)


def test_a_run_folder_is_reported_with_its_trainers_calls(tmp_path):
    calls = [*GATEWAY_CALLS, train(gw("x1", DENSE, "s1", None, 3.0, 20.0, ids=["d1"]), 5)]
    use = build_tool_use(make_run(tmp_path, "run_a", calls, TASKS, mode="hybrid"), "step")
    assert (use.summary["counted_calls"], use.summary["placed_calls"], use.summary["has_trajectory"]) == (10, 1, True)
    assert use.windows["window"].tolist() == ["5"] and use.windows["calls"].tolist() == [1]


# --- the command ------------------------------------------------------------------------------------------------


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["tool-stats", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_the_tables_and_writes_csv_json_and_a_png(ledger, capsys):
    code, out, err = run_cli(capsys, ledger, "--by", "step", "--traffic", "train")
    assert code == 0, err
    assert "8 of 9 calls counted: train traffic only (1 eval, 8 train)" in out
    assert "3 windows of 1 step from step 1 · no trajectory.jsonl: the ledger alone" in out
    assert "1 of the 8 calls carries no step, in no window" in out
    assert "tool share per step" in out and "per tool and step" in out
    step_one = next(line for line in out.splitlines() if line.startswith("│ 1 ") and "%" in line)
    assert [c.strip() for c in step_one.strip("│").split("│")] == ["1", "4", "75.0%", "25.0%", "3.33", "7.0", "18.5",
                                                                 "25.0%"]
    stats = ledger / "tool_stats"
    written = {p.name for p in stats.iterdir()} - {"realtime_calls.jsonl"}
    assert written == {"by_step.json", "by_step_windows.csv", "by_step_tools.csv", "by_step.png"}
    assert (stats / "by_step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((stats / "by_step.json").read_text())
    assert report["summary"]["traffic"] == "train" and len(report["windows"]) == 3 and len(report["tools"]) == 6
    assert pd.read_csv(stats / "by_step_tools.csv")["calls"].sum() == 7
    assert pd.read_csv(stats / "by_step_windows.csv").columns.tolist() == [
        "window", "step", "last_step", "calls", "failed_calls", "error_share", "mean_returned", "p50_ms", "p95_ms",
        "share_" + DENSE, "share_" + SPARSE]
    code, out, err = run_cli(capsys, ledger, "--by", "time", "--window", "2m")
    assert code == 0, err
    assert "9 calls counted, all traffic (1 eval, 8 train)" in out and "tool share per window" in out
    assert (stats / "by_time.png").is_file() and (stats / "by_time_tools.csv").is_file()
    assert not (stats / "report.json").exists()  # the per-tool report is not rewritten by --by


@pytest.mark.parametrize(("setup", "args", "message"), [
    ("none", ("--by", "step"), "no tool_stats/realtime_calls.jsonl here; pass the folder a gateway was started with"),
    ("empty", ("--by", "step"), "holds no tool calls yet; report again once the trainer has called"),
    ("no steps", ("--by", "step"), "carries a step; send the step with each call"),
    ("ledger", ("--window", "5"), "--window and --traffic go with --by step or --by time"),
    ("ledger", ("--by", "time", "--window", "soon"), "--window soon: with --by time give seconds"),
])
def test_what_cannot_be_reported_is_a_one_line_error_naming_the_fix(tmp_path, capsys, setup, args, message):
    folder = tmp_path / "out"
    (folder / "tool_stats").mkdir(parents=True)
    ledger = folder / "tool_stats" / "realtime_calls.jsonl"
    if setup == "empty":
        ledger.write_text("")
    elif setup == "no steps":
        write_jsonl(ledger, [c for c in LEDGER if "step" not in c])
    elif setup == "ledger":
        write_jsonl(ledger, LEDGER)
    code, out, err = run_cli(capsys, folder, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert sorted(p.name for p in (folder / "tool_stats").iterdir()) == ([] if setup == "none" else
                                                                          ["realtime_calls.jsonl"])


# --- through a real gateway -----------------------------------------------------------------------------------

HYBRID = GATEWAYS_DIR / "rag_hybrid.json"


@pytest.fixture(scope="module")
def kb(cache_dir):
    indexes = load_or_build_indexes(PASSAGES, cache_dir, which=["dense", "sparse"])
    yield KnowledgeBase(PASSAGES, indexes)
    indexes["dense"].close()


async def test_a_trainers_steps_sent_over_mcp_are_reported_by_step(kb, tmp_path, capsys):
    with gateway_on_loopback(HYBRID, kb, tmp_path) as url:
        async with HttpMCPRagEnv(url, HYBRID, traffic=TRAFFIC_TRAIN) as trainer:
            for step, tool, args in [
                (3, DENSE, {"query": "where was Arlen Voss born?", "top_k": 2}),
                (3, DENSE, {"query": "Veltrix looms", "top_k": 2}),
                (3, SPARSE, {"query": "Voss", "top_k": 1}),
                (4, SPARSE, {"query": "Voss Dravia", "top_k": 2}),
                (4, SPARSE, {"query": "Veltrix Dravia", "top_k": 2}),
                (4, DENSE, {"query": "Voss", "top_k": "lots"}),
                (None, SPARSE, {"query": "Voss"}),
            ]:
                await trainer.call(tool, args, f"rollout-{step}", step=step)
        async with HttpMCPRagEnv(url, HYBRID) as evaluation:
            await evaluation.call(SPARSE, {"query": "Voss"}, "q-1")
    code, out, err = run_cli(capsys, tmp_path, "--by", "step")
    assert code == 0, err
    assert "8 calls counted, all traffic (1 eval, 7 train)" in out and "2 of the 8 calls carry no step" in out
    report = json.loads((tmp_path / "tool_stats" / "by_step.json").read_text())
    assert [(w["window"], w["calls"], w["failed_calls"]) for w in report["windows"]] == [("3", 3, 0), ("4", 3, 1)]
    tools = {(r["window"], r["tool_name"]): r for r in report["tools"]}
    assert [(tools[("3", t)]["calls"], tools[("3", t)]["mean_returned"]) for t in (DENSE, SPARSE)] == [(2, 2.0), (1, 1.0)]
    assert tools[("4", DENSE)]["error_share"] == 1.0 and tools[("4", DENSE)]["mean_returned"] is None
    assert tools[("4", SPARSE)]["share"] == round(2 / 3, 6) and tools[("4", SPARSE)]["mean_returned"] == 2.0
    assert all(r["p50_ms"] > 0 for r in report["tools"] if r["calls"])
    assert (tmp_path / "tool_stats" / "by_step.png").read_bytes()[:4] == b"\x89PNG"
