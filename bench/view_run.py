"""A generated run folder for bench/view_scale.py: N tasks of an agent over three search tools, as a run writes them.

Questions and passages come from the demo knowledge base (questions cycled, each task its own id; a
passage's text is its own sentence followed by those of the next few passages, so a hit carries a few
hundred characters as a chunk of a real corpus does). Tasks are built with the run's own records:
`TaskResult.answered` / `failed`, `ToolCallRecord` with the gateway's `CallAccounting`, and the
`rollout.events` a real agent loop emits (llm_output with usage, tool_call, tool_result with the tool's
structured text, completion or error), with the chat messages that go with them. The mix: ~90% ok (~70%
of them right), the rest error, timeout and infra_error; 1 to 4 tool calls per task (2 to 4 when it
finishes), a few of them failing.

Serialising a record (`TaskResult.to_json`, a deep `asdict`) costs ~3 ms, which is minutes at 100,000
tasks: so `TEMPLATES` distinct tasks are built and serialised once, and task i is template i mod
`TEMPLATES` under its own id, its line the template's with that id (the bytes `append_task` would write).

Beside the trajectory: config.yaml (the mode), evaluation_summary.json (`summarize` over the same tasks)
and tool_stats/report.json with its per-tool, per-task, per-worker tables in the tool report's shape
(computed here: the report's pandas path takes minutes at this size and the viewer reads only the file).
A marker file records what was generated, so a folder already holding the same run is reused.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollout.accounting import CallAccounting
from rollout.data import ensure_demo_kb, load_corpus, load_questions
from rollout.events import (
    AnyEvent,
    CompletionEvent,
    ErrorEvent,
    LLMOutputEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from rollout.paths import default_cache_dir
from rollout.records import Passage, Question, TaskResult, ToolCallRecord
from rollout.report.scoring import summarize
from rollout.run_folder import CONFIG_FILE, trajectory_path, write_report, write_summary
from rollout.wire import OUTCOMES, structured_text

GENERATOR_VERSION = 1
"""In the marker: bumped when the generated lines change, so an older folder is written again."""
MARKER = "bench-view-run.json"
MODE = "hybrid"
TOOLS = ("query_knowledge_base_sparse", "query_knowledge_base_dense", "query_knowledge_base_hybrid")
STATUS_WEIGHTS = {"ok": 0.90, "error": 0.04, "timeout": 0.03, "infra_error": 0.03}
RIGHT_SHARE = 0.7
"""Of the ok tasks, how many answer a gold answer."""
FAILED_CALL_SHARE = 0.02
"""Tool calls of ok tasks that come back as a tool error (the agent goes on)."""
TOP_K = 5
CHUNK_SENTENCES = 2
"""Demo passages joined into one hit's text."""
WORKERS = 8
TEMPLATES = 1000
STARTED = 1_790_000_000.0
SYSTEM_PROMPT = (
    "You answer questions about a knowledge base with three search tools. query_knowledge_base_sparse is "
    "keyword search (BM25): use it for names, codes and identifiers. query_knowledge_base_dense is semantic "
    "search: use it for descriptive or paraphrased questions. query_knowledge_base_hybrid fuses both. Search, "
    "read the passages, search again for a bridge entity when a question needs two facts, and reply with a "
    "short final answer only: the exact words that answer the question, no explanation."
)
PRICE_PER_TOKEN = {"prompt": 0.15e-6, "completion": 0.6e-6}


@dataclass(frozen=True, slots=True)
class CallRow:
    """One call as the tool report counts it."""

    tool: str
    task: str
    worker: str
    ok: bool
    outcome: str
    duration_ms: float
    rtt_ms: float
    context_tokens: int


class TaskMaker:
    """Task `i` of the generated run, the same for the same `i` and seed (appended lines reuse it)."""

    def __init__(self, seed: int = 0):
        kb = ensure_demo_kb(default_cache_dir(), n_passages=2000, n_questions=200, seed=0)
        passages = load_corpus(kb.corpus_path)
        self.questions = load_questions(kb.questions_path)
        self.passages = [self._chunk(passages, k) for k in range(len(passages))]
        self.by_id = {p.id: p for p in self.passages}
        self.seed = seed

    @staticmethod
    def _chunk(passages: list[Passage], k: int) -> Passage:
        text = " ".join(passages[(k + j) % len(passages)].text for j in range(CHUNK_SENTENCES))
        return Passage(id=passages[k].id, title=passages[k].title, text=text)

    def task(self, i: int) -> tuple[TaskResult, list[CallRow]]:
        rng = random.Random(self.seed * 1_000_003 + i)
        base = self.questions[i % len(self.questions)]
        question = Question(f"q-{i:07d}", base.question, base.golden_answers, dict(base.metadata))
        status = rng.choices(list(STATUS_WEIGHTS), weights=list(STATUS_WEIGHTS.values()))[0]
        worker = f"worker-{i % WORKERS}"
        planned = rng.choice((2, 3, 3, 4))
        made = planned if status == "ok" else rng.randint(1, planned)
        t0 = t = STARTED + i * 0.05
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": question.question}]
        events: list[AnyEvent] = []
        calls: list[ToolCallRecord] = []
        rows: list[CallRow] = []
        prompt, spent = 420 + len(question.question) // 4, {"prompt_tokens": 0, "completion_tokens": 0}

        def llm_turn(turn: int, content: str | None, asked: list[dict[str, Any]], finish: str) -> None:
            nonlocal t
            completion = rng.randint(12, 60)
            latency = rng.uniform(300.0, 2500.0)
            events.append(LLMOutputEvent(t=t, turn=turn, content=content, tool_calls=asked, latency_ms=latency,
                                         usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                                "total_tokens": prompt + completion}, finish_reason=finish))
            spent["prompt_tokens"] += prompt
            spent["completion_tokens"] += completion
            t += latency / 1000.0

        for turn in range(1, made + 1):
            tool = rng.choice(TOOLS)
            query = question.question if turn == 1 else f"{rng.choice(self.passages).title} {question.question.split()[0]}"
            arguments = {"query": query, "top_k": TOP_K}
            local_id = f"call_{turn - 1}"
            llm_turn(turn, None, [{"id": local_id, "name": tool, "arguments": arguments}], "tool_calls")
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": local_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}]})
            call_id = f"{rng.getrandbits(128):032x}"
            events.append(ToolCallEvent(t=t, call_id=call_id, name=tool, arguments=arguments))
            last = turn == made
            if status == "infra_error" and last:
                ok, outcome, text = False, "upstream_unavailable", f"{tool}: the retrieval service did not answer (503)"
            elif rng.random() < FAILED_CALL_SHARE:
                ok, outcome, text = False, "tool_error", f"{tool}: query too long for the index (max 512 tokens)"
            else:
                ok, outcome, text = True, "ok", ""
            ids: list[str] = []
            if ok:
                hits = self._hits(rng, question)
                ids = [h.id for h in hits]
                text = structured_text({"query": query, "retriever": tool.rsplit("_", 1)[1], "results": [
                    {"id": h.id, "doc_id": h.id, "title": h.title, "text": h.text,
                     "score": round(rng.uniform(0.2, 9.0), 6), "rank": r} for r, h in enumerate(hits, start=1)]})
            rtt = rng.uniform(20.0, 300.0)
            accounting = CallAccounting("retrieval", len(text) // 4)
            calls.append(ToolCallRecord(call_id, tool, arguments, ok, outcome, None if ok else text, t, rtt, ids,
                                        list(ids), True, accounting))
            rows.append(CallRow(tool, question.id, worker, ok, outcome, rtt * rng.uniform(0.3, 0.9), rtt,
                                accounting.context_tokens))
            t += rtt / 1000.0
            events.append(ToolResultEvent(t=t, call_id=call_id, name=tool, ok=ok, outcome=outcome, text=text,
                                          latency_ms=rtt, result_ids=ids))
            messages.append({"role": "tool", "tool_call_id": local_id, "content": text})
            prompt += accounting.context_tokens + 30

        usage: dict[str, float] = dict(spent)
        if status == "ok":
            right = rng.random() < RIGHT_SHARE
            answer = question.golden_answers[0] if right else rng.choice(self.passages).title
            llm_turn(made + 1, answer, [], "stop")
            messages.append({"role": "assistant", "content": answer})
            events.append(CompletionEvent(t=t, prediction=answer, turns=made + 1))
            usage = self._usage(spent)
            return TaskResult.answered(question, prediction=answer, turns=made + 1, messages=messages, usage=usage,
                                       calls=calls, events=events, worker_id=worker, latency_s=t - t0), rows
        kind, error = {
            "error": ("error", "policy endpoint: HTTP 500 Internal Server Error after 3 retries"),
            "timeout": ("timeout", "task exceeded its time limit (120 s)"),
            "infra_error": ("error", f"tool {calls[-1].name} failed: upstream_unavailable"),
        }[status]
        events.append(ErrorEvent(t=t, kind=kind, message=error))
        return TaskResult.failed(question, status=status, error=error, worker_id=worker, latency_s=t - t0, calls=calls,
                                 events=events, turns=made, usage=self._usage(spent), messages=messages), rows

    def _hits(self, rng: random.Random, question: Question) -> list[Passage]:
        hits = rng.sample(self.passages, TOP_K)
        gold = [self.by_id[d] for d in question.gold_doc_ids if d in self.by_id]
        if gold and rng.random() < 0.8:
            hits[rng.randrange(TOP_K)] = rng.choice(gold)
        return hits

    @staticmethod
    def _usage(spent: dict[str, int]) -> dict[str, float]:
        cost = spent["prompt_tokens"] * PRICE_PER_TOKEN["prompt"] + spent["completion_tokens"] * PRICE_PER_TOKEN["completion"]
        return {**spent, "total_tokens": spent["prompt_tokens"] + spent["completion_tokens"], "cost_usd": round(cost, 8)}


# --- the folder -----------------------------------------------------------------------------------


class Templates:
    """`count` tasks built once; task i is template i mod `count` under the id `task_id(i)`."""

    def __init__(self, count: int = TEMPLATES, seed: int = 0):
        maker = TaskMaker(seed)
        self.tasks: list[TaskResult] = []
        self.calls: list[list[CallRow]] = []
        self.stats: list[dict[str, Any]] = []
        """Each template's row of the report's tasks table (but its id)."""
        self._tails: list[str] = []
        for j in range(count):
            task, rows = maker.task(j)
            line = json.dumps(task.to_json()) + "\n"  # as `append_task` writes it
            head = '{"id": ' + json.dumps(task.id)
            assert line.startswith(head), "a trajectory line starts with the task's id"
            self.tasks.append(task)
            self.calls.append(rows)
            self.stats.append(call_stats(rows))
            self._tails.append(line[len(head):])

    def task(self, i: int) -> TaskResult:
        return replace(self.tasks[i % len(self.tasks)], id=task_id(i))

    def line(self, i: int) -> str:
        return '{"id": ' + json.dumps(task_id(i)) + self._tails[i % len(self._tails)]


def task_id(i: int) -> str:
    return f"q-{i:07d}"


def marker(tasks: int, seed: int) -> dict[str, Any]:
    return {"generator": GENERATOR_VERSION, "tasks": tasks, "seed": seed}


def holds_run(folder: Path, tasks: int, seed: int) -> bool:
    """`folder` already holds this generated run, whole."""
    try:
        recorded = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    size = recorded.pop("trajectory_bytes", None)
    path = trajectory_path(folder)
    return recorded == marker(tasks, seed) and path.is_file() and path.stat().st_size == size


def write_run(folder: Path, tasks: int, templates: Templates, seed: int = 0) -> None:
    """Write the run folder of `tasks` generated tasks (over whatever `folder` held)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    (folder / CONFIG_FILE).write_text(f"mode_name: {MODE}\n", encoding="utf-8")
    report = ReportTally()

    def written() -> Iterator[TaskResult]:
        with trajectory_path(folder).open("w", encoding="utf-8") as f:
            for i in range(tasks):
                f.write(templates.line(i))
                report.add(task_id(i), templates, i % len(templates.tasks))
                yield templates.task(i)

    write_summary(folder, summarize(written(), mode=MODE, gateway_file="conf/gateways/rag_hybrid.json",
                                    wall_time_s=tasks * 0.05, deterministic_agent=False))
    write_report(folder, report.report(folder))
    done = {**marker(tasks, seed), "trajectory_bytes": trajectory_path(folder).stat().st_size}
    (folder / MARKER).write_text(json.dumps(done) + "\n", encoding="utf-8")


def append_tasks(folder: Path, start: int, count: int, templates: Templates) -> int:
    """Append tasks `start`..`start + count - 1` to the trajectory a line at a time, as a live run does; returns
    the bytes written."""
    path = trajectory_path(folder)
    before = path.stat().st_size
    with path.open("a", encoding="utf-8") as f:
        for i in range(start, start + count):
            f.write(templates.line(i))
            f.flush()
    return path.stat().st_size - before


# --- the tool report ------------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks, as the report's (pandas') quantiles."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 3)


def call_stats(rows: list[CallRow]) -> dict[str, Any]:
    """A row of the tool report's tables (`rollout.report.tool_calls.report._call_stats`'s columns) over `rows`."""
    total, success = len(rows), sum(r.ok for r in rows)
    duration, rtt, context = [r.duration_ms for r in rows], [r.rtt_ms for r in rows], [r.context_tokens for r in rows]
    outcomes = defaultdict(int)
    for r in rows:
        outcomes[r.outcome] += 1
    return {
        "total_calls": total, "success_calls": success, "failed_calls": total - success,
        "success_rate": round(success / total, 4) if total else None,
        **{f"p{int(q * 100)}_ms": _quantile(duration, q) for q in (0.5, 0.95, 0.99)},
        **{f"rtt_p{int(q * 100)}_ms": _quantile(rtt, q) for q in (0.5, 0.95, 0.99)},
        "rtt_calls": total, "accounted_calls": total,
        "context_tokens_mean": round(sum(context) / total, 3) if total else None,
        **{f"context_tokens_p{int(q * 100)}": _quantile(context, q) for q in (0.5, 0.95)},
        "llm_tokens_mean": 0.0,
        **{f"outcome_{o}": outcomes.get(o, 0) for o in OUTCOMES},
    }


class ReportTally:
    """tool_stats/report.json of the generated calls: per-task rows as the tasks go by, the rest at the end."""

    def __init__(self) -> None:
        self.tasks: list[dict[str, Any]] = []
        self.calls: list[CallRow] = []

    def add(self, task: str, templates: Templates, template: int) -> None:
        self.tasks.append({"task_id": task, **templates.stats[template]})
        self.calls.extend(templates.calls[template])  # their `task` is the template's: the tables below ignore it

    def _table(self, key: str, of: Any) -> list[dict[str, Any]]:
        groups: dict[str, list[CallRow]] = defaultdict(list)
        for r in self.calls:
            groups[of(r)].append(r)
        return [{key: name, **call_stats(groups[name])} for name in sorted(groups)]

    def report(self, folder: Path) -> dict[str, Any]:
        overall = call_stats(self.calls)
        tools = self._table("tool_name", lambda r: r.tool)
        summary = {"run_dir": str(folder), "mode": MODE, "has_trajectory": True,
                   **{k: v for k, v in overall.items() if not k.startswith("outcome_")},
                   "tools_used": [t["tool_name"] for t in tools], "degraded_tools": {},
                   "outcomes": {o: overall[f"outcome_{o}"] for o in OUTCOMES if overall[f"outcome_{o}"]},
                   "tasks_with_calls": len(self.tasks), "workers_with_calls": WORKERS, "discarded_calls": 0}
        return {"summary": summary, "tools": tools, "tasks": self.tasks, "workers": self._table("worker_id", lambda r: r.worker),
                "modes": self._table("mode", lambda r: MODE), "gateways": self._table("served_by", lambda r: "gateway"),
                "retrieval": [], "discarded_attempts": []}
