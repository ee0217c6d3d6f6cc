"""Scorers to name in `scoring.scorers` as they are, or to copy as the start of one's own (`docs/scoring.md`).

Each takes a task record, the trajectory line as a dict, and returns a number, a dict of numbers, or None.
"""

from __future__ import annotations

from typing import Any


def gold_share(task: dict[str, Any]) -> float | None:
    """Retrieval precision: the share of the distinct documents the task's tool calls returned that are gold
    documents (`metadata.gold_doc_ids`, passage or source document ids). None when the question has no gold ids
    or the calls returned nothing. Retrieval recall asks how much of the gold was found; this, how much of what
    the agent read was gold."""
    gold = set((task.get("metadata") or {}).get("gold_doc_ids") or [])
    is_gold: dict[str, bool] = {}  # passage id → it or its source document is gold
    for call in task.get("tool_calls") or []:
        ids, docs = call.get("result_ids") or [], call.get("result_doc_ids") or []
        for passage, doc in zip(ids, docs) if len(docs) == len(ids) else ((i, i) for i in ids):
            is_gold[passage] = is_gold.get(passage, False) or passage in gold or doc in gold
    if not gold or not is_gold:
        return None
    return sum(is_gold.values()) / len(is_gold)
