"""Tool-call report of one run folder: per tool, task, worker and mode, and retrieval quality.

Every number is rebuilt from the files on disk (`rollout.report.tool_calls.ledger.load_calls`), never from
in-memory counters, so the report of a crashed run is as exact as that of a finished one.

Definitions
- server time is the gateway's `duration_ms`; round-trip time (`rtt_*`) is the client's
  `latency_ms` for the same `call_id`. Quantiles use pandas' default linear interpolation
  (numpy.percentile's "linear"); None when no call has the value.
- context tokens per call (`context_tokens_mean`, `_p50`, `_p95`) are the tokens of the result text the
  agent received, from the ledger line's `accounting`; `llm_tokens_mean` is the prompt + completion
  tokens of the LLM calls the tool made itself. Both are over the `accounted_calls` alone: a call
  refused before a tool ran, or recorded by an older gateway, has no accounting and is left out.
- A retrieval call returned ids (of passages or documents, `rollout.wire.result_ids`: `filter_documents` and
  `chunk_documents` calls are among them) or is a tool named `query_knowledge_base*`/`search*`.
  `hit_at_k` is the share of successful retrieval calls, in tasks with known gold ids, whose first
  k returned ids include a gold id (a passage id, or its document id, equal to one of the task's
  `metadata.gold_doc_ids`); `hit_at_all` looks at every id returned.
- Calls are counted once each, from the attempts the trajectory kept (`rollout.report.tool_calls.ledger`);
  ledger records of discarded attempts are counted apart in `discarded_calls` and listed per task
  and attempt in the `discarded_attempts` table.
- `degraded_tools` (in the summary) names the tools the gateway listed as degraded, with why
  (`tool_stats/degraded_tools.json`, see `rollout.wire.META_DEGRADED`); empty when none was.
- A call repeats a query when the same task (question and repeat) already called the same tool with the
  same normalised `query` argument (case-folded, whitespace collapsed), whatever its other arguments;
  `repeated_query_share` is repeated calls / calls with a `query` argument (the retrieval table).
- `repeated_calls` (every table and the summary) counts the calls that repeat an earlier call of their
  task with every argument the same once normalised (`rollout.repetition`: a different `top_k`
  is another call); `repeated_call_share` is repeated calls / calls. Calls whose arguments no
  trajectory holds (a gateway run on its own, a trainer's calls) never count as repeats.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rollout.repetition import arguments_key, normalise_text
from rollout.report.tool_calls.ledger import run_mode, split_calls
from rollout.run_folder import STATS_DIR, is_run_folder, read_degraded_tools, write_report
from rollout.wire import OUTCOMES

LATENCY_QUANTILES = (0.5, 0.95, 0.99)
HIT_KS = (1, 3, 5)
HIT_COLUMNS = tuple(f"hit_at_{k}" for k in (*HIT_KS, "all"))
RETRIEVAL_PREFIXES = ("query_knowledge_base", "search")
GROUP_KEYS = {"tools": "tool_name", "tasks": "task_id", "workers": "worker_id", "modes": "mode",
              "gateways": "served_by"}
"""Report table → the column it groups calls by; `gateways` has one row per replica of a Ray Serve gateway
(one row, "gateway", otherwise; calls that never reached a gateway are in no row)."""


def _quantiles(values: pd.Series, qs: tuple[float, ...]) -> list[float | None]:
    """Each quantile of `values` (missing ones left out), rounded; None when no value is there. numpy's "linear"
    method is pandas' default interpolation, and answers a report's thousands of small groups many times faster."""
    array = values.to_numpy(dtype="float64", na_value=np.nan)
    array = array[~np.isnan(array)]
    if not array.size:
        return [None] * len(qs)
    return [round(float(v), 3) for v in np.quantile(array, qs)]


def _quantile_columns(column: str, values: pd.Series, qs: tuple[float, ...]) -> dict[str, float | None]:
    """A column per quantile of `qs`, named by `column` with the percentile in place of `{}` ("p{}_ms": p50_ms)."""
    return {column.format(int(q * 100)): v for q, v in zip(qs, _quantiles(values, qs), strict=True)}


def _rate(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def _call_stats(g: pd.DataFrame, outcomes: list[str]) -> dict[str, Any]:
    total = len(g)
    success = int(g["ok"].sum())
    repeated = int(g["repeated"].sum())
    counts = g["outcome"].value_counts()
    return {
        "total_calls": total,
        "success_calls": success,
        "failed_calls": total - success,
        "success_rate": _rate(success, total),
        "repeated_calls": repeated,
        "repeated_call_share": _rate(repeated, total),
        **_quantile_columns("p{}_ms", g["duration_ms"], LATENCY_QUANTILES),
        **_quantile_columns("rtt_p{}_ms", g["rtt_ms"], LATENCY_QUANTILES),
        "rtt_calls": int(g["rtt_ms"].notna().sum()),
        **_token_stats(g),
        **{f"outcome_{o}": int(counts.get(o, 0)) for o in outcomes},
    }


def _token_stats(g: pd.DataFrame) -> dict[str, Any]:
    """Tokens per call of the calls whose ledger line carried accounting (`accounted_calls`); None without any."""
    context = g["context_tokens"].dropna()
    llm = g["llm_tokens"].dropna()
    return {
        "accounted_calls": len(context),
        "context_tokens_mean": round(float(context.mean()), 3) if len(context) else None,
        **_quantile_columns("context_tokens_p{}", context, (0.5, 0.95)),
        "llm_tokens_mean": round(float(llm.mean()), 3) if len(llm) else None,
    }


def _outcome_names(df: pd.DataFrame) -> list[str]:
    """Every outcome of the shared vocabulary gets an `outcome_<name>` column; others seen get one too."""
    return [*OUTCOMES, *sorted(set(df["outcome"].astype(str)) - set(OUTCOMES))]


def _group_table(df: pd.DataFrame, key: str, outcomes: list[str]) -> pd.DataFrame:
    rows = [
        {key: None if pd.isna(value) else str(value), **_call_stats(g, outcomes)}
        for value, g in df.groupby(key, sort=True, dropna=False)
    ]
    columns = [key, *_call_stats(df.iloc[:0], outcomes)]
    return pd.DataFrame(rows, columns=columns)


def normalise_query(query: Any) -> str | None:
    """The query as compared for repeats: case-folded, whitespace collapsed; None when not text."""
    if not isinstance(query, str) or not query.strip():
        return None
    return normalise_text(query)


def _first_of_their_kind(keys: pd.DataFrame) -> pd.Series:
    """Whether each row, in the order given, is the first with its values of `keys` (NA being a value too)."""
    return keys.groupby(list(keys.columns), sort=False, dropna=False).cumcount() == 0


def repeated_calls(df: pd.DataFrame) -> pd.Series:
    """Whether each call of `df` repeats an earlier call of its task (question and repeat) with the same tool and
    normalised arguments (`rollout.repetition`), in time order; False where the arguments are unknown."""
    repeated = pd.Series(False, index=df.index, dtype=bool)
    known = df["arguments"].notna() & df["task_id"].notna()
    if known.any():
        calls = df[known].sort_values("timestamp", kind="stable")
        keys = pd.DataFrame({"run": calls["run_dir"], "task": calls["task_id"], "repeat": calls["repeat"],
                             "tool": calls["tool_name"].astype(str),
                             "arguments": calls["arguments"].map(arguments_key)})
        first = _first_of_their_kind(keys)
        repeated.loc[first.index] = ~first
    return repeated


def _is_retrieval(df: pd.DataFrame) -> pd.Series:
    return df["result_ids"].map(bool).astype(bool) | df["tool_name"].astype(str).str.startswith(RETRIEVAL_PREFIXES)


def _hits(row: pd.Series) -> dict[str, float]:
    """1.0/0.0 per k when the call can be scored, NaN when it cannot (failed, or gold unknown)."""
    gold = row["gold_doc_ids"]
    if not row["ok"] or not gold:
        return dict.fromkeys(HIT_COLUMNS, math.nan)
    gold = set(gold)
    ids = list(row["result_ids"])
    doc_ids = list(row["result_doc_ids"] or [])
    hit = [p in gold or (i < len(doc_ids) and doc_ids[i] in gold) for i, p in enumerate(ids)]
    return {**{f"hit_at_{k}": float(any(hit[:k])) for k in HIT_KS}, "hit_at_all": float(any(hit))}


def retrieval_calls(df: pd.DataFrame) -> pd.DataFrame:
    """The retrieval calls of `df` with per-call `hit_at_*`, `returned`, `query` and `repeated` columns."""
    rc = df[_is_retrieval(df)].copy()
    hits = pd.DataFrame([_hits(r) for _, r in rc.iterrows()], index=rc.index, columns=list(HIT_COLUMNS))
    rc = pd.concat([rc, hits.astype("float64")], axis=1)
    rc["returned"] = [len(ids) for ids in rc["result_ids"]]
    rc["query"] = pd.Series(
        [normalise_query((a or {}).get("query")) if isinstance(a, dict) else None for a in rc["arguments"]],
        index=rc.index, dtype=object,
    )
    eligible = rc["query"].notna() & rc["task_id"].notna()
    rc["repeated"] = False
    if eligible.any():
        keyed = rc[eligible].sort_values("timestamp", kind="stable")
        first = _first_of_their_kind(keyed[["run_dir", "task_id", "repeat", "tool_name", "query"]])
        rc.loc[first.index, "repeated"] = ~first
    rc["has_query"] = eligible
    return rc


def _retrieval_stats(g: pd.DataFrame) -> dict[str, Any]:
    scored = g["hit_at_all"].notna()
    ok = g[g["ok"]]
    queries = int(g["has_query"].sum())
    repeated = int(g["repeated"].sum())
    return {
        "retrieval_calls": len(g),
        "scored_calls": int(scored.sum()),
        **{c: (round(float(g.loc[scored, c].mean()), 4) if scored.any() else None) for c in HIT_COLUMNS},
        "mean_returned": round(float(ok["returned"].mean()), 3) if len(ok) else None,
        "query_calls": queries,
        "repeated_calls": repeated,
        "repeated_query_share": _rate(repeated, queries),
    }


def _retrieval_table(rc: pd.DataFrame) -> pd.DataFrame:
    rows = [{"tool_name": str(t), **_retrieval_stats(g)} for t, g in rc.groupby("tool_name", sort=True)]
    return pd.DataFrame(rows, columns=["tool_name", *_retrieval_stats(rc.iloc[:0])])


def _discarded_table(discarded: pd.DataFrame) -> pd.DataFrame:
    """Ledger records of attempts the trajectory did not keep, per task and attempt."""
    rows = [
        {"task_id": None if pd.isna(task) else str(task), "attempt": None if pd.isna(attempt) else int(attempt),
         "calls": len(g), "tools": sorted(g["tool_name"].astype(str).unique().tolist())}
        for (task, attempt), g in discarded.groupby(["task_id", "attempt"], sort=True, dropna=False)
    ]
    return pd.DataFrame(rows, columns=["task_id", "attempt", "calls", "tools"])


def _summary(df: pd.DataFrame, rc: pd.DataFrame, run_dir: Path, mode: str, discarded: int) -> dict[str, Any]:
    stats = _call_stats(df, _outcome_names(df))
    return {
        "run_dir": str(run_dir),
        "mode": mode,
        "has_trajectory": is_run_folder(run_dir),
        **{k: v for k, v in stats.items() if not k.startswith("outcome_")},
        "tools_used": sorted(df["tool_name"].unique().tolist()),
        "degraded_tools": read_degraded_tools(run_dir),
        "outcomes": {str(k): int(v) for k, v in df["outcome"].value_counts().sort_index().items()},
        "tasks_with_calls": int(df["task_id"].nunique()),
        "workers_with_calls": int(df["worker_id"].nunique()),
        "discarded_calls": discarded,
        "retrieval": _retrieval_stats(rc),
    }


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if not isinstance(v, (list, dict)) and pd.isna(v) else v) for k, v in row.items()}
            for row in table.astype(object).to_dict("records")]


def _tables(run_dir: Path) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    df, discarded = split_calls(run_dir)
    df["repeated"] = repeated_calls(df)
    mode = run_mode(run_dir)
    outcomes = _outcome_names(df)
    tables = {name: _group_table(df, key, outcomes) for name, key in GROUP_KEYS.items()}
    if not len(df):
        tables["modes"] = pd.DataFrame([{"mode": mode, **_call_stats(df, outcomes)}], columns=tables["modes"].columns)
    rc = retrieval_calls(df)
    tables["retrieval"] = _retrieval_table(rc)
    tables["discarded_attempts"] = _discarded_table(discarded)
    return _summary(df, rc, run_dir, mode, len(discarded)), tables


def build_tool_report(run_dir: Path | str) -> dict[str, Any]:
    """The report of `run_dir`: {"summary", "tools", "tasks", "workers", "modes", "retrieval"}."""
    summary, tables = _tables(Path(run_dir))
    return {"summary": summary, **{name: _records(t) for name, t in tables.items()}}


def write_tool_report(run_dir: Path | str) -> Path:
    """Rebuild `tool_stats/report.json` and the per-table CSVs of `run_dir`; returns report.json's path."""
    run_dir = Path(run_dir)
    summary, tables = _tables(run_dir)
    stats_dir = run_dir / STATS_DIR
    stats_dir.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.to_csv(stats_dir / f"{name}.csv", index=False)
    report = {"summary": summary, **{name: _records(t) for name, t in tables.items()}}
    return write_report(run_dir, report)
