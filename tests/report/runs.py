"""Hand-built run folders: gateway lines, trajectory tasks and config, with numbers known by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DENSE = "query_knowledge_base_dense"
SPARSE = "query_knowledge_base_sparse"


def gw(call_id, tool, task, worker, duration, ts, *, ok=True, outcome="ok", ids=()) -> dict[str, Any]:
    """One realtime_calls.jsonl line (of a gateway before accounting: no `accounting`)."""
    return {
        "call_id": call_id, "tool_name": tool, "task_id": task, "worker_id": worker, "ok": ok,
        "outcome": outcome, "error": None if ok else f"{outcome} error", "duration_ms": duration,
        "timestamp": ts, "result_ids": list(ids),
    }


def accounted(line: dict[str, Any], context_tokens: int, *, stage="retrieval", prompt=0, completion=0) -> dict:
    """`line` with the `accounting` today's gateway writes."""
    return {**line, "accounting": {"stage": stage, "context_tokens": context_tokens, "llm_prompt_tokens": prompt,
                                   "llm_completion_tokens": completion, "llm_ms": 0.0}}


def tc(call_id, tool, latency, *, query=None, ok=True, outcome="ok", ids=(), doc_ids=None, **args) -> dict[str, Any]:
    """One trajectory tool call."""
    arguments = {"query": query, **args} if query is not None else dict(args)
    return {
        "call_id": call_id, "name": tool, "arguments": arguments, "ok": ok, "outcome": outcome,
        "error": None, "started": 0.0, "latency_ms": latency, "result_ids": list(ids),
        "result_doc_ids": list(doc_ids if doc_ids is not None else ids), "reached_gateway": True,
    }


def task(task_id, worker, gold, calls) -> dict[str, Any]:
    return {
        "id": task_id, "question": f"q {task_id}", "golden_answers": ["x"], "prediction": "x",
        "tool_calls": calls, "turns": len(calls) + 1, "error": None, "worker_id": worker,
        "latency_s": 0.1, "metadata": {"gold_doc_ids": gold, "hops": 1, "style": "plain"}, "messages": [],
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(root: Path, name: str, calls: list[dict] | None, tasks: list[dict] | None, mode: str | None = None) -> Path:
    """A run folder: tool_stats/ (with realtime_calls.jsonl unless calls is None), trajectory, config."""
    run = root / name
    (run / "tool_stats").mkdir(parents=True)
    if calls is not None:
        write_jsonl(run / "tool_stats" / "realtime_calls.jsonl", calls)
    if tasks is not None:
        write_jsonl(run / "trajectory.jsonl", tasks)
    if mode is not None:
        (run / "config.yaml").write_text(f"mode_name: {mode}\noutput_dir: {run}\nworkers: 2\n", encoding="utf-8")
    return run


# Nine gateway calls over three tasks and two workers. c6 reached the gateway without task/worker
# ids (filled from the trajectory); c8 timed out on both sides.
GATEWAY_CALLS = [
    gw("c1", DENSE, "t1", "w0", 3.0, 1.0, ids=["d9", "d1", "d2"]),
    gw("c2", SPARSE, "t1", "w0", 1.0, 2.0, ids=["d1"]),
    gw("c3", DENSE, "t1", "w0", 5.0, 3.0, ids=["d5", "d6", "d7", "d8", "d1", "d2"]),
    gw("c4", DENSE, "t2", "w1", 7.0, 4.0, ids=["d4", "d5", "d6", "d7", "d8", "d9", "d3"]),
    gw("c5", DENSE, "t2", "w1", 0.5, 5.0, ok=False, outcome="invalid_arguments"),
    gw("c6", "fetch_document", None, None, 2.0, 6.0),
    gw("c7", DENSE, "t3", "w1", 4.0, 7.0, ids=["p7#0", "p2#1"]),
    gw("c8", SPARSE, "t3", "w1", 100.0, 8.0, ok=False, outcome="timeout"),
    gw("c9", "nope", "t2", "w1", 0.25, 9.0, ok=False, outcome="unknown_tool"),
]

TASKS = [
    task("t1", "w0", ["d1"], [
        tc("c1", DENSE, 10.0, query="Alpha  Beta", ids=["d9", "d1", "d2"]),
        tc("c2", SPARSE, 20.0, query="alpha beta", ids=["d1"]),
        tc("c3", DENSE, 30.0, query=" alpha beta ", ids=["d5", "d6", "d7", "d8", "d1", "d2"]),
    ]),
    task("t2", "w1", ["d3"], [
        tc("c4", DENSE, 40.0, query="gamma", ids=["d4", "d5", "d6", "d7", "d8", "d9", "d3"]),
        tc("c5", DENSE, 5.0, query="GAMMA", ok=False, outcome="invalid_arguments", top_k=-1),
        tc("c6", "fetch_document", 8.0, doc_id="d3"),
        tc("c9", "nope", 2.0, ok=False, outcome="unknown_tool"),
    ]),
    task("t3", "w1", ["d7"], [
        tc("c7", DENSE, 50.0, query="Gamma", ids=["p7#0", "p2#1"], doc_ids=["d7", "d2"]),
        tc("c8", SPARSE, 100.5, ok=False, outcome="timeout"),
    ]),
]
