"""Where a run's tasks spent their time and tokens, added up record by record: the summary's `accounting`.

Each trajectory record carries its `rollout.accounting.TaskAccounting` (time split, context and tool-LLM tokens
per stage, the agent's tokens) and each of its tool calls the gateway's `CallAccounting`. `AccountingTally` adds
them up in one pass, keeping a few sums per tool and per stage, never the records, and gives means per task
over every record it saw, scored or not: a task that failed still cost its time and tokens.

A record written before tasks carried accounting has it rebuilt from its own fields (`task_accounting` of its
tool calls, events, usage and latency), so a run resumed across versions is summarised as one; its calls add 0
context tokens unless the gateway stamped them, which `calls_counted` against `calls` keeps visible. A run none
of whose records carries accounting gets no section at all: its zeros would read as measurements.

`rollout.report.compare.comparison` uses the same tally, so a comparison's cost columns agree with each run's summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rollout.accounting import AGENT, STAGES, RunAccounting, TaskAccounting, TimeSplit, ToolAccounting, task_accounting
from rollout.records import TaskResult
from rollout.report.running import ExactSum

TIME_DIGITS = 4
"""Seconds are rounded to 0.1 ms in the summary."""
TOKEN_DIGITS = 1
"""Token means are rounded to a tenth of a token."""
MS_DIGITS = 3


@dataclass(slots=True)
class _ToolSums:
    """One tool's sums over the records seen."""

    calls: int = 0
    counted: int = 0
    context_tokens: int = 0
    llm_tokens: int = 0
    latency_ms: ExactSum = field(default_factory=ExactSum)
    stages: Counter[str] = field(default_factory=Counter)

    def summary(self) -> ToolAccounting:
        # Ties between stages go to the first name in order, whatever order the records came in.
        stage = min(self.stages.items(), key=lambda kv: (-kv[1], kv[0]))[0] if self.stages else None
        latency = self.latency_ms.mean()
        return ToolAccounting(
            stage=stage, calls=self.calls, calls_counted=self.counted,
            context_tokens_per_call=round(self.context_tokens / self.counted, TOKEN_DIGITS) if self.counted else None,
            llm_tokens_per_call=round(self.llm_tokens / self.counted, TOKEN_DIGITS) if self.counted else None,
            latency_ms_per_call=None if latency is None else round(latency, MS_DIGITS),
        )


class AccountingTally:
    """The sums behind `RunAccounting`, added one record at a time; floats are summed exactly (`ExactSum`) so
    the means do not depend on the order the tasks finished in."""

    def __init__(self) -> None:
        self.tasks = 0
        self.stored = 0
        """Records that carried their own accounting."""
        self.calls = 0
        self.counted = 0
        self.time = {part: ExactSum() for part in ("total", "llm", "tools", "waiting")}
        self.tool_time: dict[str, ExactSum] = {}
        self.context: Counter[str] = Counter()
        self.tool_llm: Counter[str] = Counter()
        self.agent = 0
        self.tools: dict[str, _ToolSums] = {}

    def add(self, r: TaskResult) -> None:
        cost = r.accounting
        if cost is None:
            cost = task_accounting(r.tool_calls, r.events, r.usage, r.latency_s)
        else:
            self.stored += 1
        self._add_task(cost)
        for call in r.tool_calls:
            sums = self.tools.get(call.name)
            if sums is None:
                sums = self.tools[call.name] = _ToolSums()
            sums.calls += 1
            sums.latency_ms.add(call.latency_ms)
            self.calls += 1
            if (c := call.accounting) is not None:
                sums.counted += 1
                sums.context_tokens += c.context_tokens
                sums.llm_tokens += c.llm_tokens
                sums.stages[c.stage] += 1
                self.counted += 1

    def _add_task(self, cost: TaskAccounting) -> None:
        self.tasks += 1
        for part, seconds in (("total", cost.total_s), ("llm", cost.llm_s), ("tools", cost.tool_total_s),
                              ("waiting", cost.waiting_s)):
            self.time[part].add(seconds)
        for name, seconds in cost.tool_s.items():
            if (s := self.tool_time.get(name)) is None:
                s = self.tool_time[name] = ExactSum()
            s.add(seconds)
        self.context.update(cost.context_tokens)
        self.tool_llm.update(cost.tool_llm_tokens)
        self.agent += cost.agent_tokens

    def summary(self) -> RunAccounting | None:
        """Means per task and per tool; None when no record carried accounting of its own."""
        if not self.stored:
            return None
        n = self.tasks

        def per_task(total: float) -> float:
            return round(total / n, TOKEN_DIGITS)

        stages = [*STAGES, *sorted((set(self.context) | set(self.tool_llm)) - set(STAGES))]
        tokens = {stage: per_task(self.context[stage] + self.tool_llm[stage]) for stage in stages}
        tokens[AGENT] = per_task(self.agent)
        return RunAccounting(
            tasks=n, rebuilt=n - self.stored, calls=self.calls, calls_counted=self.counted,
            time_s=TimeSplit(**{part: round(s.total() / n, TIME_DIGITS) for part, s in self.time.items()}),
            tool_time_s={name: round(self.tool_time[name].total() / n, TIME_DIGITS) for name in sorted(self.tool_time)},
            context_tokens=per_task(sum(self.context.values())),
            tool_llm_tokens=per_task(sum(self.tool_llm.values())),
            tokens=tokens,
            tools={name: self.tools[name].summary() for name in sorted(self.tools)},
        )
