"""rollout's answer scorer as a training reward: the metric an evaluation reports is the reward a trainer gets.

`score(prediction, golden, metric)` is the evaluation's own `rollout.report.metrics` function; `compute_score` has
verl's reward signature and reads the `ground_truth` that `rollout export --format verl-rl` writes
(`reward_model.ground_truth = {"target": [golden answers]}`), so a verl run configured with

    custom_reward_function.path=<rollout>/rollout/trainers/reward.py custom_reward_function.name=compute_score

rewards exactly what `evaluation_summary.json` scores. The answer is the content of the last answer tag of the
policy's text (`<answer> … </answer>` unless the caller names other tags); a text without one scores 0, as it does
in Search-R1's reward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rollout.errors import ConfigError
from rollout.report.metrics import contains_answer, exact_match, f1_score

METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "em": exact_match,
    "f1": f1_score,
    "contains": contains_answer,
}
"""The reward metrics: each is the evaluation's metric of the same name (`exact_match`, `f1`, `contains`)."""
DEFAULT_METRIC = "em"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


def metric_function(metric: str) -> Callable[[str, Sequence[str]], float]:
    """The scorer of `metric`; an unknown name is a `ConfigError` listing the known ones."""
    try:
        return METRICS[metric]
    except (KeyError, TypeError):
        raise ConfigError(f"reward metric {metric!r} is not one of {', '.join(METRICS)}") from None


def score(prediction: str, golden: Sequence[str], metric: str = DEFAULT_METRIC) -> float:
    """The evaluation's score of one answer."""
    return metric_function(metric)(prediction, list(golden))


def last_answer(text: str, open_tag: str = ANSWER_OPEN, close_tag: str = ANSWER_CLOSE) -> str | None:
    """The content of the last complete answer tag in `text` (stripped); None when there is none."""
    end = text.rfind(close_tag)
    while end != -1:
        start = text.rfind(open_tag, 0, end)
        if start != -1:
            return text[start + len(open_tag):end].strip()
        end = text.rfind(close_tag, 0, end)
    return None


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
