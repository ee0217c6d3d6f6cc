"""BrowseComp-Plus task records made by hand, with docids, citations and verdicts whose numbers are known by hand.

`known_run` is five questions of a `mode=bcp_bm25` run (tools `search` and `get_document`), each a case of
`rollout.report.browsecomp_leaderboard`:

| query | how it ended | evidence | gold | search calls returned | get_document | cites | verdict |
|---|---|---|---|---|---|---|---|
| 1 | answered | 100 101 102 103 | 101 | 100 200 300 400 500; 101 100 600 700 800 | 101 | 100 101 102 999 | right, 80% |
| 2 | answered | 110 111 | 111 | 110 900 901 902 903 | | none | wrong, 30% |
| 3 | out of turns | 120 | 120 | 120 …; 121 …; 122 … | | ([120], not an answer) | "right" |
| 4 | infra_error | 130 | | 130 | | | |
| 5 | cut at max_tokens | 140 141 | (none) | 140 | | ([140], not an answer) | "right" |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.extra_scores import write_scores
from rollout.run_folder import CONFIG_FILE, append_task, trajectory_path

JUDGE_MODEL = "Qwen/Qwen3-32B"
AGENT_MODEL = "my-org/agent-7b"


def call(name: str, docids: list[str], n: int, **arguments: Any) -> ToolCallRecord:
    """A tool call that returned `docids` (passages `<docid>#0`, as a chunked dense index returns them)."""
    return ToolCallRecord(
        call_id=f"c{n}", name=name, arguments=arguments or {"query": f"query {n}"}, ok=True, outcome="ok",
        error=None, started=0.0, latency_ms=5.0, result_ids=[f"{d}#0" for d in docids], result_doc_ids=list(docids),
        reached_gateway=True,
    )


def function_call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def answer_task(qid: str, calls: list[ToolCallRecord], final: str, metadata: dict[str, Any], *,
                messages: list[dict[str, Any]] | None = None, prediction: str = "x", **flags: Any) -> TaskResult:
    """An answered task whose last message is `final` (the conversation `messages` before it, if given)."""
    question = Question(qid, f"question {qid}?", ["gold"], metadata)
    conversation = [{"role": "user", "content": question.question}, *(messages or []),
                    *([{"role": "assistant", "content": final}] if final else [])]
    task = TaskResult.answered(question, prediction=prediction, turns=len(calls) + 1, messages=conversation,
                               usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                               calls=calls, events=[], worker_id="w0", latency_s=0.1)
    for flag, value in flags.items():
        setattr(task, flag, value)
    return task


FINAL_1 = "Explanation: A is B [100][101], and C [999, 102].\nExact Answer: Kelmor\nConfidence: 80%"
FINAL_2 = "Explanation: no citation here.\nExact Answer: Dravia\nConfidence: 30%"

TOOL_REPLY_1 = json.dumps([{"docid": d, "score": 1.0, "snippet": "..."} for d in ("100", "200", "300", "400", "500")])


def known_tasks() -> list[TaskResult]:
    q1_messages = [
        {"role": "assistant", "content": "Let me search.", "tool_calls": [function_call(1, "search", {"query": "a"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_REPLY_1},
        {"role": "assistant", "content": None, "tool_calls": [function_call(2, "search", {"query": "b"})]},
        {"role": "tool", "tool_call_id": "call_2", "content": "[...]"},
        {"role": "assistant", "content": None, "tool_calls": [function_call(3, "get_document", {"docid": "101"})]},
        {"role": "tool", "tool_call_id": "call_3", "content": "the whole of document 101"},
    ]
    return [
        answer_task("1", [call("search", ["100", "200", "300", "400", "500"], 1),
                          call("search", ["101", "100", "600", "700", "800"], 2),
                          call("get_document", ["101"], 3, docid="101")],
                    FINAL_1, {"evidence_doc_ids": ["100", "101", "102", "103"], "gold_doc_ids": ["101"]},
                    messages=q1_messages, prediction="Kelmor"),
        answer_task("2", [call("search", ["110", "900", "901", "902", "903"], 4)], FINAL_2,
                    {"evidence_doc_ids": ["110", "111"], "gold_doc_ids": ["111"]}, prediction="Dravia"),
        answer_task("3", [call("search", ["120", "900"], 5), call("search", ["121"], 6), call("search", ["122"], 7)],
                    "", {"evidence_doc_ids": ["120"], "gold_doc_ids": ["120"]}, prediction="",
                    messages=[{"role": "assistant", "content": "Let me search [120] again.",
                               "tool_calls": [function_call(8, "search", {"query": "c"})]}],
                    out_of_turns=True),
        TaskResult.failed(Question("4", "question 4?", ["gold"], {"evidence_doc_ids": ["130"]}), status="infra_error",
                          error="the gateway timed out", calls=[call("search", ["130"], 9)]),
        answer_task("5", [call("search", ["140"], 10)], "Explanation: [140]\nExact Answer: Li",
                    {"evidence_doc_ids": ["140", "141"]}, truncated=True),
    ]


KNOWN_VERDICTS = {"1": (1.0, 0.8), "2": (0.0, 0.3), "3": (1.0, 1.0), "5": (1.0, 0.9)}
"""judge_correct and confidence per query as `rollout report judge` stores them (query 4 failed: not judged)."""


def write_verdicts(run_dir: Path, verdicts: dict[str, tuple[float | None, float | None]], *,
                   preset: str = "browsecomp_plus") -> None:
    """scores/judge.jsonl and its meta as a judging writes them."""
    write_scores(run_dir, "judge", [{"id": qid, "repeat": 0, "metrics": {"judge_correct": c, "confidence": conf}}
                                    for qid, (c, conf) in verdicts.items()],
                 meta={"source": "judge", "judge_key": f"{preset}-x", "preset": preset, "model": JUDGE_MODEL})


def write_run(run_dir: Path, tasks: list[TaskResult], *, mode: str = "bcp_bm25",
              verdicts: dict[str, tuple[float | None, float | None]] | None = None) -> Path:
    """A run folder: its trajectory, config.yaml (mode and agent model) and, when given, the judge's scores."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with trajectory_path(run_dir).open("a", encoding="utf-8") as f:
        for task in tasks:
            append_task(f, task)
    (run_dir / CONFIG_FILE).write_text(
        f"mode_name: {mode}\nscore_failed: false\nagent:\n  _target_: rollout.agents.openai_agent.OpenAIAgent\n"
        f"  llm:\n    model: {AGENT_MODEL}\n", encoding="utf-8")
    if verdicts is not None:
        write_verdicts(run_dir, verdicts)
    return run_dir
