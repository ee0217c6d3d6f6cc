"""The tool calls of an interrupted run's unfinished tasks, counted from the gateway's ledger.

After Ctrl-C the trajectory holds the finished tasks alone, while the gateway has recorded every call that reached
it (`tool_stats/realtime_calls.jsonl`, each line written before its call is answered: `rollout.gateway.stats`). A
run stopped while its tasks were still running would print no tool calls over the dozens it made. So the summary of
an interrupted run adds, per tool, the ledger's calls since the run started whose task no record holds:

- each call once, by its id: a call sent again on a new session after a broken stream is one call, its last answer;
- none that a record counts already: the calls of a task the trajectory holds, and of that task's lost attempts
  (a worker that died under it), are that record's business (`rollout.report.tool_calls.ledger` lists lost attempts apart);
- no trainer's call (`via`, `traffic`: no task of this run made it), and none from before the run started (an
  earlier run into the folder).

Only the run's own gateway writes into the folder: with `gateway.url=` there is no ledger here, and nothing is added.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rollout.jsonl import iter_jsonl
from rollout.records import TaskResult, wire_task_id
from rollout.run_folder import ledger_paths
from rollout.summary import ToolUse


class UnfinishedCalls:
    """The ledger's calls since a run started, but those of the tasks whose records the summary saw: it keeps the
    finished tasks' ids alone and reads the ledger once, at `tools()`, holding only the unfinished tasks' calls."""

    def __init__(self, run_dir: Path | str, started_at: float) -> None:
        self._run_dir = Path(run_dir)
        self._started_at = started_at
        self._finished: set[str] = set()
        """Wire task ids of the records seen."""

    @classmethod
    def since(cls, run_dir: Path | str, started_at: float) -> UnfinishedCalls:
        """The calls the ledgers of `run_dir` recorded from Unix time `started_at` on."""
        return cls(run_dir, started_at)

    def finished(self, r: TaskResult) -> None:
        """`r` is in the trajectory: its calls are counted from it."""
        self._finished.add(wire_task_id(r.id, r.repeat))

    def _by_task(self) -> dict[str | None, dict[str, tuple[str, bool]]]:
        """Wire task id → call id → (tool name, ok), of the tasks no record holds."""
        by_task: dict[str | None, dict[str, tuple[str, bool]]] = {}
        for path in ledger_paths(self._run_dir):
            for n, line in enumerate(iter_jsonl(path)):
                at = line.get("timestamp")
                if not isinstance(at, int | float) or at < self._started_at or line.get("via") or line.get("traffic"):
                    continue
                task = line.get("task_id")
                task = None if task is None else str(task)
                if task in self._finished:
                    continue
                call_id = line.get("call_id") or f"{path.name}:{n}"  # a call without an id is a call of its own
                by_task.setdefault(task, {})[str(call_id)] = (str(line.get("tool_name") or ""),
                                                               bool(line.get("ok", False)))
        return by_task

    def tools(self) -> dict[str, ToolUse]:
        """Calls and failures per tool (sorted by name) of the tasks no record holds."""
        calls: Counter[str] = Counter()
        failed: Counter[str] = Counter()
        for task_calls in self._by_task().values():
            for name, ok in task_calls.values():
                calls[name] += 1
                failed[name] += not ok
        return {name: ToolUse(n, failed[name]) for name, n in sorted(calls.items())}
