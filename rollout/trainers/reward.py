"""rollout's answer scorer as a training reward: the metric an evaluation reports is the reward a trainer gets.

`score(prediction, golden, metric)` is the evaluation's own `rollout.report.metrics` function; `compute_score` has
verl's reward signature and reads the `ground_truth` that `rollout export --format verl-rl` writes
(`reward_model.ground_truth = {"target": [golden answers]}`), so a verl run configured with

    custom_reward_function.path=<rollout>/rollout/trainers/reward.py custom_reward_function.name=compute_score

rewards exactly what `evaluation_summary.json` scores. The answer is the content of the last answer tag of the
policy's text (`<answer> … </answer>` unless the caller names other tags; `rollout.answer_tag.last_answer`, which
`agent=openai agent.answer_tag=answer` reads an evaluated answer with); a text without one scores 0, as it does in
Search-R1's reward.

`compute_judge_score` is the same with an LLM judge's verdict in place of the metric: the grader presets and
endpoint settings of `rollout report judge` (`reward_kwargs.judge`), asynchronous, as verl awaits a coroutine reward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rollout.answer_tag import ANSWER_CLOSE, ANSWER_OPEN, last_answer
from rollout.errors import ConfigError, LLMError
from rollout.report.metrics import contains_answer, exact_match, f1_score

METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "em": exact_match,
    "f1": f1_score,
    "contains": contains_answer,
}
"""The reward metrics: each is the evaluation's metric of the same name (`exact_match`, `f1`, `contains`)."""
DEFAULT_METRIC = "em"


def metric_function(metric: str) -> Callable[[str, Sequence[str]], float]:
    """The scorer of `metric`; an unknown name is a `ConfigError` listing the known ones."""
    try:
        return METRICS[metric]
    except (KeyError, TypeError):
        raise ConfigError(f"reward metric {metric!r} is not one of {', '.join(METRICS)}") from None


def score(prediction: str, golden: Sequence[str], metric: str = DEFAULT_METRIC) -> float:
    """The evaluation's score of one answer."""
    return metric_function(metric)(prediction, list(golden))


def golden_answers(ground_truth: Any) -> list[str]:
    """The golden answers of a verl row's `ground_truth`: `{"target": [...]}` as the verl-rl export writes it (a
    list, or the numpy array pandas reads from parquet), a bare list, or one string."""
    target = ground_truth.get("target") if isinstance(ground_truth, Mapping) else ground_truth
    if target is None:
        raise ConfigError(f"ground_truth {ground_truth!r} holds no answers: rows written by `rollout export "
                          "--format verl-rl` carry {'target': [golden answers]}")
    if isinstance(target, str):
        return [target]
    return [str(t) for t in list(target)]


def row_ground_truth(row: Mapping[str, Any]) -> Any:
    """A training row's ground truth: `reward_model.ground_truth`, as `rollout export --format verl-rl` (and verl)
    write it, or SkyRL's `reward_spec.ground_truth`; a row with neither is a `ConfigError` naming the export."""
    for key in ("reward_spec", "reward_model"):
        spec = row.get(key)
        if isinstance(spec, Mapping) and spec.get("ground_truth") is not None:
            return spec["ground_truth"]
    raise ConfigError(f"the row has neither reward_spec.ground_truth nor reward_model.ground_truth (its columns: "
                      f"{', '.join(sorted(row)) or 'none'}): write the rows with `rollout export --questions "
                      "OVERRIDES --format verl-rl --out FILE.parquet`")


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    metric: str = DEFAULT_METRIC,
    answer_open: str = ANSWER_OPEN,
    answer_close: str = ANSWER_CLOSE,
    **_: Any,
) -> float:
    """verl's reward function signature: the score of the last answer in `solution_str` against the row's golden
    answers. `metric`, `answer_open` and `answer_close` come from verl's `custom_reward_function.reward_kwargs`;
    verl's other keyword arguments are not read."""
    answer = last_answer(solution_str, answer_open, answer_close)
    return 0.0 if answer is None else score(answer, golden_answers(ground_truth), metric)


JUDGE_SETTING_NAMES = {"model": "reward_kwargs.judge.model=NAME", "base_url": "reward_kwargs.judge.base_url=URL",
                       "preset": "reward_kwargs.judge.preset", "concurrency": "reward_kwargs.judge.concurrency=N",
                       "block": "reward_kwargs.judge"}
"""How the judge's settings are named in verl's `custom_reward_function` (for the errors that name one)."""


async def compute_judge_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    judge: Mapping[str, Any] | None = None,
    answer_open: str = ANSWER_OPEN,
    answer_close: str = ANSWER_CLOSE,
    **_: Any,
) -> float:
    """verl's reward signature, awaited: 1.0 when an LLM judge grades the last answer in `solution_str` correct, else
    0.0 (wrong, not attempted, a reply its preset cannot read, or no answer tag, which is not asked about).

    `judge` is a judge block as a run's `judge:` config holds it (`model`, `base_url`, `preset` (default simpleqa),
    `api_key_env`, `sampling`, ...), from `reward_kwargs.judge`; the question is the row's `extra_info.question`,
    which `rollout export --format verl-rl` writes. A judge that cannot be asked is a `JudgeError` naming the fix:
    a reward the judge never gave would train on nothing."""
    # The judge's modules (openai's client) are imported by the judge's reward only.
    from rollout.llm.chat_client import ChatClient, RetryPolicy
    from rollout.report.judge.grader import JudgeError, JudgeSettings, gold_target, unanswered
    from rollout.report.judge.presets import JUDGE_CORRECT

    settings = JudgeSettings.from_config(judge, JUDGE_SETTING_NAMES)
    answer = last_answer(solution_str, answer_open, answer_close)
    if answer is None:
        return 0.0
    question = (extra_info or {}).get("question")
    if not isinstance(question, str) or not question:
        raise ConfigError("the judge's reward needs the question in the row's extra_info.question: rows written by "
                          "`rollout export --questions ... --format verl-rl` carry it")
    messages = settings.preset.messages(question, gold_target(golden_answers(ground_truth)), answer)
    client = ChatClient(settings.llm, RetryPolicy(settings.llm.max_retries))
    try:
        completion = await client.complete(messages)
    except LLMError as e:
        raise JudgeError(f"the reward's {unanswered(e, settings).removeprefix('the ')}") from e
    finally:
        await client.aclose()
    verdict = settings.preset.parse(completion.content or "")
    return float(verdict.metrics.get(JUDGE_CORRECT) or 0.0)
