"""A question set as verl RL prompts: the questions a run would ask, opened as its agent would open them.

The set is named the way a run names it, by Hydra overrides of rollout's own conf/ (`dataset=nq
dataset.questions.path=...`, `dataset.limit=`, `mode=`, `agent=`), composed as `python -m rollout` would
compose them: the same questions, in the same order, train and evaluate. Each prompt is the conversation the
configured agent opens with: rollout's function-calling agents send the mode's system prompt, then the
question; with `agent=openai agent.answer_tag=answer` the system prompt ends with the sentence asking for the tag,
the very text the agent sends (`rollout.answer_tag.system_prompt_with_answer_tag`). Another agent (a tagged-text
one, say) opens its own way: it defines `opening_messages(question, system_prompt) -> list[dict]`, or its prompts
are refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hydra.utils import get_class, instantiate

from envs.http_mcp_env import DEFAULT_SYSTEM_PROMPT
from rollout.answer_tag import system_prompt_with_answer_tag
from rollout.data.dataset import QuestionSet, data_sources
from rollout.errors import ConfigError, ExportError, RolloutError
from rollout.export.formats import PromptRow
from rollout.export.trajectories import FUNCTION_CALLING_AGENTS
from rollout.run.config import RunConfig, compose_without_corpus

OpeningMessages = Callable[[str], list[dict[str, Any]]]
LLM_AGENT = "rollout.agents.openai_agent.OpenAIAgent"
"""The function-calling agent that needs an endpoint to be built; the others are built offline."""


def compose_questions(overrides: Sequence[str]) -> RunConfig:
    """The run config these overrides compose; an override that is not `key=value`, or that conf/ refuses,
    is an ExportError naming it."""
    loose = [o for o in overrides if "=" not in o]
    if loose:
        raise ExportError(f"--questions takes Hydra overrides of conf/ such as dataset=nq "
                          f"dataset.questions.path=FILE (got {' '.join(loose)}); none means the demo dataset")
    try:
        return compose_without_corpus(overrides)
    except ConfigError as e:
        raise ExportError(f"--questions {' '.join(overrides)}: {e}") from e


def prompt_opener(agent_config: dict[str, Any], system_prompt: str | None) -> OpeningMessages:
    """How the configured agent opens a task's conversation, given the question."""
    system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT  # what the run's environment falls back to
    target = str(agent_config.get("_target_"))
    if target in FUNCTION_CALLING_AGENTS:
        if target != LLM_AGENT:  # built as a run builds it: a setting it refuses (agent.answer_tag) is refused here
            build_agent(agent_config)
        system_prompt = system_prompt_with_answer_tag(system_prompt, agent_config.get("answer_tag"))
        return lambda question: [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]
    try:
        has_own = callable(getattr(get_class(target), "opening_messages", None))
    except Exception as e:  # noqa: BLE001 - Hydra wraps an unimportable target in several exception types
        raise ExportError(f"agent._target_={target} cannot be imported ({e})") from e
    if not has_own:
        raise ExportError(f"agent {target} opens its conversations its own way and defines no opening_messages("
                          "question, system_prompt): its prompts cannot be built here. Use a function-calling "
                          "agent (agent=openai), or give the agent that method")
    agent = build_agent(agent_config)
    return lambda question: agent.opening_messages(question, system_prompt)


def build_agent(agent_config: dict[str, Any]) -> Any:
    """The configured agent; one its config refuses is an ExportError with the agent's own words."""
    try:
        return instantiate(agent_config)
    except Exception as e:  # noqa: BLE001 - the agent's own ConfigError arrives wrapped by Hydra
        cause = e.__cause__ if isinstance(e.__cause__, RolloutError) else e
        raise ExportError(f"could not build agent {agent_config.get('_target_')} for its prompts: {cause}") from e


def prompt_rows(cfg: RunConfig, data_source: str | None = None) -> Iterator[PromptRow]:
    """One verl RL prompt row per question of the run's question set (after `dataset.limit`), in order."""
    opening = prompt_opener(cfg.agent, cfg.system_prompt)
    questions = QuestionSet(data_sources(cfg.dataset, cfg.cache_dir)[1], cfg.dataset.limit)
    split = cfg.dataset.questions.split
    for index, q in enumerate(questions):
        yield PromptRow(data_source or cfg.dataset.name, opening(q.question), list(q.golden_answers), index, split,
                        q.id, q.question, q.gold_doc_ids)
