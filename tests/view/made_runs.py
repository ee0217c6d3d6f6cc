"""Small run folders for the viewer's tests, written from the real records without running anything.

`write_run(folder, tasks)` writes what a run writes that the viewer reads: trajectory.jsonl (one
`TaskResult.to_json` line per task), config.yaml (its mode) and, unless asked not to, the tool report.
`task(...)` builds one task as an agent would have: a search, its result, an answer, with events.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rollout.accounting import CallAccounting
from rollout.events import (
    CompletionEvent,
    ErrorEvent,
    LLMOutputEvent,
    LLMThinkingEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.run_folder import append_task

T0 = 1_700_000_000.0
DENSE = "query_knowledge_base_dense"
SPARSE = "query_knowledge_base_sparse"
HOSTILE = "</script><img src=x onerror=\"window.__pwned=1;alert(1)\"><script>window.__pwned=2</script>"
"""Model output that would run as script if a page did not escape it."""


def task(qid: str, question: str, gold: str, prediction: str, *, status: str = "ok", tool: str = DENSE,
         result_ids: tuple[str, ...] = ("p1", "p2", "p3"), gold_ids: tuple[str, ...] = ("p2",), result_text: str = "",
         repeat: int = 0, tokens: int = 150, thinking: str = "") -> TaskResult:
    """One task: (thinking,) a `tool` search returning `result_ids`, then `prediction` (or a failure when
    `status` is not ok)."""
    args = {"query": question, "top_k": len(result_ids)}
    text = result_text or "\n".join(f"[{p}] passage {p} about {question}" for p in result_ids)
    call = ToolCallRecord(
        call_id=f"{qid}-c1", name=tool, arguments=args, ok=True, outcome="ok", error=None, started=T0 + 0.3,
        latency_ms=40.0, result_ids=list(result_ids), result_doc_ids=list(result_ids), reached_gateway=True,
        accounting=CallAccounting(stage="retrieval", context_tokens=60),
    )
    events = [LLMThinkingEvent(t=T0, turn=1, content=thinking)] if thinking else []
    events += [
        LLMOutputEvent(t=T0 + 0.2, turn=1, tool_calls=[{"id": call.call_id, "name": tool, "arguments": args}],
                       usage={"prompt_tokens": tokens - 20, "completion_tokens": 20, "total_tokens": tokens},
                       latency_ms=200.0, finish_reason="tool_calls"),
        ToolCallEvent(t=T0 + 0.3, call_id=call.call_id, name=tool, arguments=args),
        ToolResultEvent(t=T0 + 0.34, call_id=call.call_id, name=tool, ok=True, outcome="ok", text=text,
                        latency_ms=40.0, result_ids=list(result_ids)),
    ]
    q = Question(qid, question, [gold], {"gold_doc_ids": list(gold_ids)})
    usage = {"prompt_tokens": tokens - 20, "completion_tokens": 20, "total_tokens": tokens}
    if status != "ok":
        events.append(ErrorEvent(t=T0 + 1.0, kind="error", message=f"the endpoint failed: {prediction}"))
        return TaskResult.failed(q, status=status, error=f"the endpoint failed: {prediction}", worker_id="w0",  # type: ignore[arg-type]
                                 latency_s=1.0, repeat=repeat, calls=[call], events=events, turns=1, usage=usage)
    events += [LLMOutputEvent(t=T0 + 0.9, turn=2, content=prediction, latency_ms=500.0, finish_reason="stop"),
               CompletionEvent(t=T0 + 0.9, prediction=prediction, turns=2)]
    return TaskResult.answered(q, prediction=prediction, turns=2, messages=[{"role": "user", "content": question}],
                               usage=usage, calls=[call], events=events, worker_id="w0", latency_s=0.9 + repeat,
                               repeat=repeat)


def write_run(folder: Path, tasks: list[TaskResult], *, mode: str = "hybrid", report: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"mode_name": mode}), encoding="utf-8")
    with (folder / "trajectory.jsonl").open("a", encoding="utf-8") as f:
        for t in tasks:
            append_task(f, t)
    if report:
        calls = [c for t in tasks for c in t.tool_calls]
        names = sorted({c.name for c in calls})
        tools = [{"tool_name": n, "total_calls": sum(c.name == n for c in calls),
                  "success_calls": sum(c.name == n and c.ok for c in calls),
                  "failed_calls": sum(c.name == n and not c.ok for c in calls), "success_rate": 1.0,
                  "p50_ms": 40.0, "p95_ms": 41.0, "context_tokens_mean": 60.0} for n in names]
        (folder / "tool_stats").mkdir(exist_ok=True)
        (folder / "tool_stats" / "report.json").write_text(json.dumps({"summary": {}, "tools": tools}), encoding="utf-8")
    return folder


def ask_question_set(folder: Path, questions: str, digest: str) -> Path:
    """Record in a made run's config.yaml and fingerprint.json, as a run of `dataset=files` records them, that it
    asked the questions of /data/`questions`.jsonl, whose content hashes to `digest`."""
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["dataset"] = {"name": questions, "kind": "files", "questions": {"path": f"/data/{questions}.jsonl"}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (folder / "fingerprint.json").write_text(json.dumps({"dataset": {"questions": digest}}), encoding="utf-8")
    return folder


def two_runs(root: Path) -> tuple[Path, Path]:
    """A sweep's folder with dense and hybrid runs of six questions: q1, q2 right in both; q3 right only in
    hybrid; q4 right only in dense; q5 wrong in both; q6 failed in dense (so not paired)."""
    answers = {"q1": ("Rome", "Rome"), "q2": ("Paris", "Paris"), "q3": ("Oslo", "Bergen"), "q4": ("Lima", "Lima"),
               "q5": ("Bonn", "Bonn"), "q6": ("Kyiv", "Kyiv")}
    dense_pred = {"q1": "Rome", "q2": "Paris", "q3": "Bergen", "q4": "Lima", "q5": "Köln", "q6": "timeout"}
    hybrid_pred = {"q1": "Rome", "q2": "Paris", "q3": "Oslo", "q4": "Cusco", "q5": "Köln", "q6": "Kyiv"}
    dense = [task(q, f"capital question {q}?", gold, dense_pred[q], status="error" if q == "q6" else "ok")
             for q, (gold, _) in answers.items()]
    hybrid = [task(q, f"capital question {q}?", gold, hybrid_pred[q], tool=SPARSE if q in ("q3", "q4") else DENSE)
              for q, (gold, _) in answers.items()]
    return write_run(root / "dense", dense, mode="dense"), write_run(root / "hybrid", hybrid, mode="hybrid")
