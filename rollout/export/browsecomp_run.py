"""A run in BrowseComp-Plus' run format: one JSON file per query, which its evaluator judges unchanged.

`rollout export RUN --format browsecomp-plus --out DIR` writes `DIR/<query_id>.json` for each question of the run
(its repeat 0), shaped as texttron/BrowseComp-Plus' search-agent clients write them (`search_agent/*_client.py`,
commit 97c637c) and as its README's "Evaluation" section asks:

    {"metadata": {"model": ..., ...}, "query_id": ..., "tool_call_counts": {"search": 3, "get_document": 1},
     "status": "completed", "retrieved_docids": [...], "usage": {...},
     "result": [{"type": "tool_call", "tool_name", "arguments", "output"}, ...,
                {"type": "output_text", "tool_name": null, "arguments": null, "output": "Explanation: ..."}]}

so that `python scripts_evaluation/evaluate_run.py --input_dir DIR` judges it. What each field holds is
`rollout.report.browsecomp_leaderboard`'s reading of the record (status, response, retrieved docids); `result` is
the conversation as its clients record it: each assistant text that is not the answer as `reasoning`, each function
call with the tool's reply as `tool_call`, the final response last as `output_text` (the item the evaluator reads).
A task that did not end ok is written too, with its failure as its status: the evaluator counts it as a wrong
answer, as the leaderboard counts every query.

Beside DIR, `<DIR>.evaluation_summary.json` holds what `evaluate_run.py` writes into its `evaluation_summary.json`
(the file submitted to the leaderboard), computed here from the run's own `browsecomp_plus` judge verdicts
(`rollout report judge RUN --preset browsecomp_plus`, the same prompt): not inside DIR, where the evaluator would
read it as one more run file.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from rollout.errors import ExportError
from rollout.records import TaskKey, TaskResult
from rollout.report.browsecomp_leaderboard import (
    COMPLETED,
    JUDGE_PRESET,
    SEARCH_TOOLS,
    BrowseCompPlusTally,
    QueryRun,
    judge_of,
)
from rollout.report.extra_scores import read_scores
from rollout.run_folder import is_run_folder, iter_trajectory, read_config, write_json

SUMMARY_SUFFIX = ".evaluation_summary.json"
"""`<DIR>.evaluation_summary.json`: the evaluator names its summary `evaluation_summary.json`."""
CHANGE_ME = "change me when submitting"
"""What `evaluate_run.py` writes where it cannot know the value (the retriever's name, a link)."""
USAGE_NAMES = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens", "total_tokens": "total_tokens"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def run_file(task: TaskResult, query: QueryRun, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The query's run file."""
    data: dict[str, Any] = {
        "metadata": dict(metadata),
        "query_id": query.query_id,
        "tool_call_counts": dict(query.tool_call_counts),
        "status": query.status,
        "retrieved_docids": list(query.retrieved_docids),
    }
    if task.usage:  # under the names its clients give them
        data["usage"] = {name: task.usage[k] for k, name in USAGE_NAMES.items() if k in task.usage}
    data["result"] = result_items(task, query.response)
    return data


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def result_items(task: TaskResult, response: str) -> list[dict[str, Any]]:
    """The conversation as BrowseComp-Plus' clients record it, the final response last (see the module)."""
    replies = {m.get("tool_call_id"): _text(m.get("content")) for m in task.messages if m.get("role") == "tool"}
    answer = next((i for i in range(len(task.messages) - 1, -1, -1)
                   if task.messages[i].get("role") == "assistant" and task.messages[i].get("content") == response),
                  None) if response else None
    items: list[dict[str, Any]] = []
    for i, message in enumerate(task.messages):
        if message.get("role") != "assistant":
            continue
        text = _text(message.get("content")).strip()
        if text and i != answer:
            items.append({"type": "reasoning", "tool_name": None, "arguments": None, "output": [text]})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append({"type": "tool_call", "tool_name": function.get("name"),
                          "arguments": function.get("arguments"), "output": replies.get(call.get("id"), "")})
    if response:
        items.append({"type": "output_text", "tool_name": None, "arguments": None, "output": response})
    return items


def file_name(query_id: str) -> str:
    """`<query_id>.json`, any character a file name should not hold replaced by `_` (the evaluator reads the id
    inside the file, never its name)."""
    return f"{_UNSAFE.sub('_', query_id) or '_'}.json"


def summary_path(out_dir: Path) -> Path:
    return out_dir.with_name(out_dir.name + SUMMARY_SUFFIX)


@dataclass
class ExportedRun:
    """What an export wrote and what it found."""

    out_dir: Path
    summary_path: Path
    files: int = 0
    not_completed: Counter[str] = field(default_factory=Counter)
    """Queries written with a status other than completed, by status (its first words)."""
    other_repeats: int = 0
    """Records of repeats after the first, not written (a run file is one per query)."""
    judge_preset: str | None = None

    def line(self) -> str:
        parts = [f"wrote {self.files:,} run file{'' if self.files == 1 else 's'} to {self.out_dir} (browsecomp-plus) "
                 f"and the leaderboard summary {self.summary_path}"]
        if self.not_completed:
            reasons = ", ".join(f"{n:,} {why}" for why, n in sorted(self.not_completed.items(), key=lambda r: -r[1]))
            parts.append(f"{sum(self.not_completed.values()):,} not completed, counted wrong: {reasons}")
        if self.other_repeats:
            parts.append(f"{self.other_repeats:,} records of later repeats left out (one file per query)")
        if self.judge_preset != JUDGE_PRESET:
            parts.append(f"Accuracy is null without {JUDGE_PRESET} verdicts: rollout report judge RUN --preset "
                         f"{JUDGE_PRESET} --model NAME, or judge DIR with its evaluate_run.py")
        return "; ".join(parts)


def check_out_dir(out_dir: Path) -> None:
    """DIR must be a folder holding no run files: the evaluator reads every *.json in it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir} is a file: --format browsecomp-plus writes a folder of run files")
    held = sorted(out_dir.glob("*.json")) if out_dir.is_dir() else []
    if held:
        raise ExportError(f"--out {out_dir} already holds {len(held):,} .json files, which BrowseComp-Plus' evaluator "
                          "would read with these: name a new folder, or delete that one first")


def _agent_model(config: Mapping[str, Any] | None) -> str | None:
    agent = (config or {}).get("agent")
    llm = agent.get("llm") if isinstance(agent, Mapping) else None
    model = llm.get("model") if isinstance(llm, Mapping) else None
    return None if model is None else str(model)


def export_browsecomp_plus(run_dir: Path | str, out_dir: Path | str) -> ExportedRun:
    """Write the run's files into `out_dir` and the leaderboard summary beside it (see the module)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not is_run_folder(run_dir):
        raise ExportError(f"{run_dir}: no trajectory.jsonl here; pass a run folder such as "
                          "results/<experiment>/<mode>")
    check_out_dir(out_dir)
    config = read_config(run_dir) or {}
    model = _agent_model(config)
    metadata = {"model": model, "rollout_mode": config.get("mode_name") or run_dir.name, "rollout_run": str(run_dir)}
    extra = read_scores(run_dir)
    judge = judge_of(extra)
    tally = BrowseCompPlusTally(judge, always=True)
    exported = ExportedRun(out_dir, summary_path(out_dir), judge_preset=judge[0])
    per_query: list[dict[str, Any]] = []
    seen: set[TaskKey] = set()
    out_dir.mkdir(parents=True, exist_ok=True)
    for task in iter_trajectory(run_dir, keep=("messages",)):
        if task.repeat != 0:
            exported.other_repeats += 1
            continue
        if task.key in seen:  # resume keeps one line per task; a second one is stale, as scoring reads it
            continue
        seen.add(task.key)
        query = tally.add(task, extra.of(task.key))
        assert query is not None
        (out_dir / file_name(task.id)).write_text(
            json.dumps(run_file(task, query, metadata), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        exported.files += 1
        if query.status != COMPLETED:
            exported.not_completed[query.status.split(":")[0]] += 1
        per_query.append({"query_id": query.query_id, "correct": query.correct,
                          "recall": None if query.evidence_recall is None else round(100 * query.evidence_recall, 2)})
    write_json(exported.summary_path, leaderboard_summary(tally, per_query, model))
    return exported


def leaderboard_summary(tally: BrowseCompPlusTally, per_query: list[dict[str, Any]],
                        model: str | None) -> dict[str, Any]:
    """`evaluation_summary.json` as `evaluate_run.py` writes it, its keys in its order, plus the leaderboard's
    submission field "Search Calls"; a number it cannot have is null (Accuracy without verdicts, the calibration
    error under 100 judged answers, where that script writes 0)."""
    scores = tally.summary()
    assert scores is not None, "an export's tally is made with always=True"
    n = tally.queries
    return {
        "LLM": model or CHANGE_ME,
        "Accuracy (%)": scores.accuracy,
        "Recall (%)": scores.evidence_recall,
        "avg_tool_stats": {tool: count / n for tool, count in tally.calls.items()} if n else {},
        "Search Calls": sum(tally.calls[t] for t in SEARCH_TOOLS) / n if n else 0.0,
        "Calibration Error (%)": scores.calibration_error,
        "Retriever": CHANGE_ME,
        "Link": CHANGE_ME,
        "Evaluation Date": date.today().isoformat(),
        "per_query_metrics": per_query,
    }
