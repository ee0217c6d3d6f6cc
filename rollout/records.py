"""Typed records that cross the project's boundaries: corpus and questions in, tool calls and finished tasks out.

Passages and questions are read from files (FlashRAG conventions); a tool call is what the client
saw; a `TaskResult` is one line of trajectory.jsonl. Ray carries these dataclasses between the driver
and the workers; they become JSON only at file edges (`to_json` / `from_json`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import copy
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rollout.accounting import CallAccounting, TaskAccounting, task_accounting
from rollout.events import AnyEvent, answer_cut, event_from_json
from rollout.wire import Outcome

TaskStatus = Literal["ok", "error", "timeout", "infra_error"]
"""ok: the agent answered with the tools working. error: the task failed (see `error`). timeout: it hit
its time limit. infra_error: a tool call failed for infrastructure reasons (`rollout.wire.INFRA_OUTCOMES`:
gateway down or timed out, upstream unavailable), so any answer lacks the evidence it asked for."""


TaskKey = tuple[str, int]
"""(question id, repeat): what one trajectory record answers."""


def task_key(record: dict[str, Any]) -> TaskKey:
    """The key of a trajectory record read from disk (records before repeats existed are repeat 0)."""
    return str(record.get("id")), int(record.get("repeat") or 0)


def wire_task_id(question_id: str, repeat: int) -> str:
    """The task id a repeat's tool calls carry to the gateway: per-task gateway state (tool sets) must not
    be shared between two repeats of one question running at once. Repeat 0 keeps the question's id."""
    return question_id if repeat == 0 else f"{question_id}#{repeat}"


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable unit of the corpus."""

    id: str
    """Stable passage id, as in the corpus file."""
    title: str
    """First line of FlashRAG's `contents`."""
    text: str
    """The rest of `contents`."""
    doc_id: str | None = None
    """Source document of a chunk; None when the passage is the whole document."""

    @property
    def source_id(self) -> str:
        """The document this passage comes from: `doc_id` for a chunk, else the passage's own id."""
        return self.doc_id if self.doc_id is not None else self.id

    @property
    def contents(self) -> str:
        """FlashRAG's `contents` field: title, newline, text."""
        return f"{self.title}\n{self.text}"

    def to_json(self) -> dict[str, Any]:
        """A FlashRAG corpus line; `doc_id` only when set."""
        record: dict[str, Any] = {"id": self.id, "contents": self.contents}
        if self.doc_id is not None:
            record["doc_id"] = self.doc_id
        return record


@dataclass(frozen=True, slots=True)
class Question:
    """One task of the question set."""

    id: str
    """Task id, unique within the set."""
    question: str
    """What the agent is asked."""
    golden_answers: list[str]
    """Accepted answers; scoring never shows these to the agent."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form extras; `gold_doc_ids`, `hops` and `style` are read when present."""

    @property
    def gold_doc_ids(self) -> list[str]:
        return [str(d) for d in self.metadata.get("gold_doc_ids", [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What an agent sees after calling a tool."""

    ok: bool
    """False when the tool reported an error (the agent may retry or go on)."""
    text: str
    """The tool's text content, joined; the error message when not ok."""
    structured: dict[str, Any] | None = None
    """The tool's structured content, when it returns one."""


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tools/call as the client saw it; stored in trajectory.jsonl."""

    call_id: str
    """Id sent in the request `_meta`; the gateway's stats record carries the same id."""
    name: str
    """Tool name."""
    arguments: dict[str, Any]
    """Arguments as the agent gave them."""
    ok: bool
    """True when the tool answered without error."""
    outcome: Outcome
    """Category of the result (`rollout.wire.Outcome`), the same word the gateway's ledger records."""
    error: str | None
    """Error text when not ok."""
    started: float
    """Unix time the request was sent."""
    latency_ms: float
    """Round-trip time seen by the client."""
    result_ids: list[str]
    """Ids of the passages or documents the tool returned, in its order (`rollout.wire.result_ids`); empty when
    it returned none."""
    result_doc_ids: list[str]
    """Their source document ids, one per id (equal to the ids unless documents were chunked)."""
    reached_gateway: bool
    """False when the environment refused the call locally (tool not offered in this mode)."""
    accounting: CallAccounting | None = None
    """What the call cost as the gateway measured it (stage, context tokens, the tool's own LLM tokens);
    None when the call never reached a gateway that reports it."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # the accounting as `CallAccounting.to_json`, which is its fields

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCallRecord:
        """A tool call of a trajectory line. `name`, `ok`, `outcome` and `latency_ms` are what every
        reader needs and must be there (TypeError otherwise); the rest default (`_CALL_DEFAULTS`),
        so lines written before `result_doc_ids` existed, or written by hand, still read."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a tool call record is a JSON object, not {type(data).__name__}")
        missing = [k for k in cls.__dataclass_fields__ if k not in data and k not in _CALL_DEFAULTS]
        if missing:
            raise TypeError(f"tool call record without {', '.join(missing)}")
        # A copy of a default: records must not share one mutable list or dict.
        fields = {k: data[k] if k in data else copy(_CALL_DEFAULTS[k]) for k in cls.__dataclass_fields__}
        fields["accounting"] = CallAccounting.from_json(fields["accounting"])
        return cls(**fields)


_CALL_DEFAULTS: dict[str, Any] = {
    "call_id": "", "arguments": {}, "error": None, "started": 0.0, "result_ids": [], "result_doc_ids": [],
    "reached_gateway": True, "accounting": None,
}
"""Values of the tool call fields a stored line may lack. `result_doc_ids` came later; its absence
means no document ids were recorded, which is what scoring has always read it as."""


@dataclass(slots=True)
class TaskResult:
    """What happened on one task, scored later by `rollout.report.scoring`.

    Built by `answered` or `failed`; Ray carries it from the worker to the driver as is, and it
    becomes JSON only as a trajectory line (`to_json`, read back by `from_json`)."""

    id: str
    """Task id from the question file."""
    question: str
    """The question as asked."""
    golden_answers: list[str]
    """Accepted answers (the agent never saw these)."""
    prediction: str
    """The agent's final answer ("" on error)."""
    tool_calls: list[ToolCallRecord]
    """The task's tool calls as the client saw them, in the order they were made."""
    turns: int
    """Policy steps taken."""
    error: str | None
    """Why the task failed, or None."""
    worker_id: str
    """Rollout worker that ran it."""
    latency_s: float
    """Wall-clock time of the task."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The question's metadata (gold_doc_ids, hops, style, ...)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation in chat-completions form."""
    status: TaskStatus = "ok"
    """See `TaskStatus`; only `ok` tasks are scored by default."""
    usage: dict[str, float] = field(default_factory=dict)
    """Token usage of the task (prompt_tokens, completion_tokens, total_tokens, cost_usd when priced)."""
    events: list[AnyEvent] = field(default_factory=list)
    """`rollout.events` of the task in order (llm_output, tool_call, tool_result, completion, error)."""
    attempts: int = 1
    """How many times the task was started (more than 1 when a worker died under it); the gateway's
    ledger records this attempt number with each of its calls."""
    repeat: int = 0
    """Which of the run's `repeats` runs of this question this is (0-based)."""
    seed: int | None = None
    """Seed handed to the agent for this repeat (sampling agents use it; None before seeds existed)."""
    accounting: TaskAccounting | None = None
    """Where the task's time and tokens went (`rollout.accounting`); built from the fields above by
    `answered` and `failed`, None on lines written before it existed."""
    truncated: bool = False
    """The answer was cut at the model's token limit (the answering reply's finish_reason was `length`); set only
    on `ok` tasks, whose status it leaves as is: the endpoint worked, the answer is the model's, cut. False on lines
    written before finish reasons were kept."""
    out_of_turns: bool = False
    """The agent used all its turns (`agent.max_turns`) without giving an answer: `prediction` is "" and the status
    ok, so the task is scored as a wrong answer, and counted apart. False on lines written before it was kept."""
    offered_tools: list[str] | None = None
    """With dynamic tool sets (the gateway file's `dynamic_toolsets`): the names of every tool the agent was offered
    at some turn, in the order first offered; the run's tools.json holds their specs. None when every turn offered
    the run's tools (or on lines written before it was kept)."""
    out_of_context: bool = False
    """The conversation outgrew the model's context window before the agent answered: the server refused the next
    request as too long, or `llm.context_window` showed it could not fit. Status ok, prediction "" (or what the agent
    had answered), scored as it stands and counted apart, as `out_of_turns` is: the agent's limit is its outcome.
    `stop_message` keeps the server's words. False on lines written before it was kept."""
    stop_message: str | None = None
    """Why the agent stopped short of an answer, in the words of whoever stopped it (the server's context-window
    refusal, or its error on a call it could not read, as it sent them); None when it answered."""
    no_answer_tag: bool = False
    """The agent was to tag its answer (`agent.answer_tag`) and its final message holds no complete tag: status ok,
    prediction "" (the training reward scores such a text 0), scored as a wrong answer and counted in the summary's
    warnings. The message itself stays in `messages`. False on lines written before it was kept."""
    unreadable_call: bool = False
    """The model's last reply was a tool call its server could not read, and the server answered with an error in
    place of the reply (llama-server's HTTP 500 "Failed to parse tool call arguments as JSON"): status ok, prediction
    "", scored as a wrong answer and counted in the summary's warnings, as what the model wrote. Not retried.
    `stop_message` keeps the server's words. False on lines written before it was kept."""

    @property
    def key(self) -> TaskKey:
        return self.id, self.repeat

    @classmethod
    def answered(
        cls, question: Question, *, prediction: str, turns: int, messages: Sequence[dict[str, Any]],
        usage: Mapping[str, float], calls: Sequence[ToolCallRecord], events: Sequence[AnyEvent], worker_id: str,
        latency_s: float, attempts: int = 1, repeat: int = 0, seed: int | None = None, out_of_turns: bool = False,
        out_of_context: bool = False, stop_message: str | None = None, offered_tools: Sequence[str] | None = None,
        no_answer_tag: bool = False, unreadable_call: bool = False,
    ) -> TaskResult:
        """The record of a task the agent ended with its tools working (status ok); `out_of_turns` and
        `out_of_context`: its answer is "" because it ran out of turns or of context (`stop_message` says how);
        `no_answer_tag`: because its final message lacked the answer tag it was to write; `unreadable_call`: because
        its server could not read the tool call it wrote."""
        return cls(
            id=question.id, question=question.question, golden_answers=list(question.golden_answers),
            prediction=prediction, tool_calls=list(calls), turns=turns, error=None, worker_id=worker_id,
            latency_s=latency_s, metadata=dict(question.metadata), messages=list(messages), status="ok",
            usage=dict(usage), events=list(events), attempts=attempts, repeat=repeat, seed=seed,
            accounting=task_accounting(calls, events, usage, latency_s), truncated=answer_cut(events),
            out_of_turns=out_of_turns, out_of_context=out_of_context, stop_message=stop_message,
            offered_tools=None if offered_tools is None else list(offered_tools), no_answer_tag=no_answer_tag,
            unreadable_call=unreadable_call,
        )

    @classmethod
    def failed(
        cls, question: Question, *, status: TaskStatus, error: str, worker_id: str = "", latency_s: float = 0.0,
        attempts: int = 1, repeat: int = 0, seed: int | None = None, calls: Sequence[ToolCallRecord] = (),
        events: Sequence[AnyEvent] = (), turns: int = 0, usage: Mapping[str, float] | None = None,
        prediction: str = "", messages: Sequence[dict[str, Any]] = (), offered_tools: Sequence[str] | None = None,
    ) -> TaskResult:
        """The record of a task that failed (`status` error, timeout or infra_error) because of `error`.

        Whatever the task got to is kept: the calls and events so far, and, when the infrastructure
        failed a task the agent did answer, its `prediction` and `messages`. Without a worker (no
        actor could finish it) `worker_id` is "" and `latency_s` 0."""
        if status == "ok" or not error:
            raise ValueError(f"a failed task needs a failure status and its error, got status={status!r}, "
                             f"error={error!r}; use TaskResult.answered for a task that succeeded")
        return cls(
            id=question.id, question=question.question, golden_answers=list(question.golden_answers),
            prediction=prediction, tool_calls=list(calls), turns=turns, error=error, worker_id=worker_id,
            latency_s=latency_s, metadata=dict(question.metadata), messages=list(messages), status=status,
            usage=dict(usage or {}), events=list(events), attempts=attempts, repeat=repeat, seed=seed,
            accounting=task_accounting(calls, events, usage or {}, latency_s),
            offered_tools=None if offered_tools is None else list(offered_tools),
        )

    def to_json(self) -> dict[str, Any]:
        """The trajectory line: every field in declaration order, tool calls and events as their JSON."""
        data = asdict(self)  # tool calls become their `to_json` (both are asdict)
        data["events"] = [e.to_json() for e in self.events]  # asdict would drop each event's `type`
        data["accounting"] = None if self.accounting is None else self.accounting.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskResult:
        """A trajectory line. Keys this version does not know are ignored; missing optional fields (lines
        of older runs) take their defaults; a malformed tool call or event raises TypeError or ValueError."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if "tool_calls" in fields:
            fields["tool_calls"] = [ToolCallRecord.from_json(c) for c in fields["tool_calls"] or []]
        if "events" in fields:
            fields["events"] = [event_from_json(e) for e in fields["events"] or []]
        if fields.get("accounting") is not None:
            fields["accounting"] = TaskAccounting.from_json(fields["accounting"])
        return cls(**fields)
