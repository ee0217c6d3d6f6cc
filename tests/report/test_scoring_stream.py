"""The streaming `summarize` writes the very summary the pandas one did, and holds nothing per record."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from rollout.records import Question, TaskResult, ToolCallRecord
from rollout.report.running import ExactSum
from rollout.report.scoring import summarize
from tests.report.scoring_oracle import summarize as summarize_with_pandas

ANSWERS = ["Paris", "New York City", "the Blue River", "42"]
PREDICTIONS = ["Paris", "paris!", "Lyon", "New York", "York City", "the blue river", "Blue", "42", "4 2", ""]


def random_task(rng: random.Random, i: int, *, hops: str, style: str, usage: bool) -> TaskResult:
    """Task i with a random status, repeat, answer, tool calls and metadata."""
    repeat = rng.randrange(3)
    status = rng.choice(["ok"] * 6 + ["error", "timeout", "infra_error"])
    gold = rng.choice([[], ["d1"], ["d1", "d2"], ["d1", "d2", "d3"]])
    calls = [
        ToolCallRecord(
            call_id=f"c{i}-{j}", name=rng.choice(["query_knowledge_base_dense", "query_knowledge_base_sparse"]),
            arguments={"query": "x"}, ok=(ok := rng.random() > 0.1), outcome="ok" if ok else "tool_error",
            error=None, started=0.0, latency_ms=1.0, result_ids=rng.sample(["d1", "d2", "d3", "d4"], 2),
            result_doc_ids=[], reached_gateway=True,
        )
        for j in range(rng.randrange(4))
    ]
    metadata: dict = {"gold_doc_ids": gold}
    if hops == "ints" or (hops == "some" and rng.random() > 0.2):
        metadata["hops"] = rng.choice([1, 2])
    if style == "all" or (style == "some" and rng.random() > 0.2):
        metadata["style"] = rng.choice(["exact", "paraphrase", "identifier"])
    question = Question(f"q{rng.randrange(40)}", "?", rng.sample(ANSWERS, rng.randrange(1, 3)), metadata)
    tokens = {"total_tokens": rng.randrange(100, 900), "cost_usd": rng.random() / 1000} if usage else {}
    prediction = rng.choice(PREDICTIONS)
    if status == "ok":
        overflow = rng.random() < 0.1  # the conversation outgrew the model's context: scored, counted apart
        return TaskResult.answered(question, prediction="" if overflow else prediction, turns=2, messages=[],
                                   usage=tokens, calls=calls, events=[], worker_id="w0", latency_s=0.1, repeat=repeat,
                                   out_of_context=overflow, stop_message="too long" if overflow else None)
    return TaskResult.failed(question, status=status, error="e", prediction=prediction, calls=calls, usage=tokens,
                             worker_id="w0", latency_s=0.1, repeat=repeat)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("score_failed", [False, True])
def test_the_streaming_summary_is_byte_for_byte_the_pandas_one(seed, score_failed):
    rng = random.Random(seed)
    hops, style = ["ints", "some", "none"][seed % 3], ["all", "some"][seed % 2]
    # Duplicate question ids across records: pass@k groups each question's repeats.
    tasks = [random_task(rng, i, hops=hops, style=style, usage=seed % 2 == 0) for i in range(300)]
    if seed == 5:
        tasks = [t for t in tasks if t.repeat == 0]  # one repeat: no CI, no pass@k
    kwargs = {"mode": "m", "gateway_file": "g.json", "wall_time_s": 3.21, "score_failed": score_failed}
    streamed = summarize(iter(tasks), **kwargs).to_json()
    # The pandas oracle predates accounting (checked by hand in test_summary_accounting.py); all else must agree.
    assert streamed.pop("accounting")["tasks"] == len(tasks)
    # Repeats too (checked by hand in test_repetition.py): every call asks "x", so about half the tasks loop.
    assert streamed.pop("repeated_calls")["tasks"] == len(tasks)
    # The oracle predates warnings too: one, as every record has tool calls or not (and perhaps the looping one).
    [warning] = [w for w in streamed.pop("warnings") if "repeat themselves" not in w]
    assert warning.startswith(f"{streamed['out_of_context']} of {len(tasks)} tasks ran out of the model's context")
    oracle = summarize_with_pandas(tasks, **kwargs).to_json()
    assert oracle.pop("warnings") == []
    assert json.dumps(streamed, indent=2) == json.dumps(oracle, indent=2)


def test_labels_of_numeric_hops_follow_the_old_column_types():
    def hops_labels(values):
        tasks = [random_task(random.Random(i), i, hops="none", style="all", usage=False) for i in range(len(values))]
        for t, v in zip(tasks, values, strict=True):
            if v is not None:
                t.metadata["hops"] = v
        return list(summarize(tasks, mode="m", gateway_file="g", wall_time_s=0, score_failed=True).by_hops or {})

    assert hops_labels([1, 2, 2]) == ["1", "2"]
    assert hops_labels([1, None, 2]) == ["1.0", "2.0"]  # a missing value made the column float
    assert hops_labels([1, 1.0, 2.5]) == ["1.0", "2.5"]
    assert hops_labels([1, "two", None]) == ["1", "two"]
    assert hops_labels([None, None]) == []


def test_an_exact_sum_does_not_depend_on_the_order():
    values = [0.1, 1e16, 0.3, -1e16, 2 / 3, 1e-9] * 50
    sums = []
    for seed in range(5):
        random.Random(seed).shuffle(values)
        s = ExactSum()
        for v in values:
            s.add(v)
        sums.append(s.total())
    assert len(set(sums)) == 1 and sums[0] == pytest.approx(50 * (0.1 + 0.3 + 2 / 3 + 1e-9), rel=1e-12)
    merged = ExactSum()
    merged.merge(s)
    assert (merged.total(), merged.count) == (s.total(), s.count)


def test_summarizing_holds_nothing_per_record():
    """Memory while summarizing 1,000 vs 10,000 records streamed from a generator: only what pass@k keeps per
    record may grow (9 bytes, ~35 while it sorts them at the end); the pandas summary grew ~870 bytes a record."""

    def peak(n: int) -> int:
        rng = random.Random(0)
        tracemalloc.start()
        summarize((random_task(rng, i, hops="ints", style="all", usage=True) for i in range(n)),
                  mode="m", gateway_file="g", wall_time_s=0)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    peak(1_000)  # imports and first-use caches
    grown = peak(10_000) - peak(1_000)
    assert grown < 9_000 * 64, f"summarizing 9,000 more records took {grown:,} more bytes"
