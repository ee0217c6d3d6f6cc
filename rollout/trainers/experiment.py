"""An experiment, as a trainer reads it: the Hydra overrides `python -m rollout` takes name the gateway file, the
question set, the agent's tag protocol and its limits, so `mode=dense agent=search_r1 dataset=nq ...` is one string
list that evaluates and trains alike.

Composed exactly as a run composes it (`rollout.run.config.compose_run_config`); the corpus is not read here (the
gateway serves it), so a dataset whose corpus path is left to fill in composes without it.
"""

from __future__ import annotations

import functools
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.agents.tag_protocol import TagProtocol
from rollout.data.dataset import QuestionSet, data_sources
from rollout.errors import ConfigError
from rollout.records import Question
from rollout.run.config import RunConfig, compose_without_corpus

DEFAULT_TEXT_AGENT = "agent=search_r1"
"""The agent of a text policy's experiment that names none (a run's default agent calls tools natively)."""
PROTOCOL_KEYS = ("instruction", "searches", "answer", "information", "passage", "strip_results", "no_results",
                 "invalid", "stop")
"""The `agent.*` keys of a tag protocol (conf/agent/tagged.yaml and its presets)."""


@dataclass(frozen=True, slots=True)
class TrainingExperiment:
    """One experiment's gateway file, questions, protocol and limits."""

    overrides: tuple[str, ...]
    config: RunConfig

    @classmethod
    def compose(cls, overrides: Sequence[str] = ()) -> TrainingExperiment:
        """The experiment these overrides name (none: the demo); a bad one is a `ConfigError` naming it."""
        loose = [o for o in overrides if "=" not in o]
        if loose:
            raise ConfigError(f"an experiment is named by Hydra overrides such as mode=dense agent=search_r1 "
                              f"(got {' '.join(loose)})")
        try:
            config = compose_without_corpus(overrides)  # the gateway serves the corpus; it is not read here
        except ConfigError as e:
            raise ConfigError(f"experiment {' '.join(overrides)}: {e}") from e
        if (tag := config.agent.get("answer_tag")) is not None:
            # An episode's answer is its answer tool's argument or its protocol's answer tag, never a final message.
            raise ConfigError(f"agent.answer_tag={tag!r} reads an evaluated agent's final message; an episode here "
                              "ends with its answer tool or its tag protocol's answer, so it cannot be honoured: drop "
                              "it (to train on tagged answers in verl, export the prompts with it and reward with "
                              "compute_score)")
        return cls(tuple(overrides), config)

    @property
    def gateway_file(self) -> Path:
        return self.config.gateway_config_path.resolve()  # a trainer may run from another folder

    @property
    def mode(self) -> str:
        return self.config.mode_name

    def questions(self) -> QuestionSet:
        """The questions a run of this experiment asks, in its order, after `dataset.limit`."""
        _, questions = data_sources(self.config.dataset, self.config.cache_dir)
        return QuestionSet(questions, self.config.dataset.limit)

    def question(self, *, index: int | None = None, question_id: str | None = None) -> Question:
        """One question, by position or by id (a `ConfigError` naming the set's size or the unknown id)."""
        questions = self.questions()
        if question_id is not None:
            found = next((q for q in questions if q.id == question_id), None)
            if found is None:
                raise ConfigError(f"question id {question_id!r} is not in this experiment's {len(questions)} "
                                  "questions")
            return found
        position = index or 0
        if not 0 <= position < len(questions):
            raise ConfigError(f"question {position} is out of range: this experiment has {len(questions)}")
        return questions[position]

    @property
    def agent(self) -> dict[str, Any]:
        return self.config.agent

    def protocol(self) -> TagProtocol:
        """The agent's tag protocol; an agent without one (function calling) is a `ConfigError` naming the fix."""
        missing = [k for k in ("instruction", "searches", "answer", "information", "passage") if k not in self.agent]
        if missing:
            raise ConfigError(f"agent {self.agent.get('_target_')} speaks no tag protocol (no agent.{missing[0]}): "
                              "train a text policy with agent=search_r1, agent=r1_searcher or agent=tagged")
        return TagProtocol.from_config(**{k: self.agent[k] for k in PROTOCOL_KEYS if k in self.agent})

    @property
    def top_k(self) -> int | None:
        """Passages per search the agent asks for (`agent.top_k`; None: the tool's default)."""
        value = self.agent.get("top_k")
        return int(value) if value is not None else None

    @property
    def max_turns(self) -> int:
        return int(self.agent.get("max_turns") or 5)


def text_policy_overrides(experiment: str | Sequence[str]) -> tuple[str, ...]:
    """The overrides of a text policy's experiment as a trainer's config gives them: one string, split as the shell
    splits it, or a list; `agent=search_r1` first when they name no agent (a run's default agent calls tools
    natively and speaks no tag protocol)."""
    given = shlex.split(experiment) if isinstance(experiment, str) else [str(o) for o in experiment]
    if not any(o.lstrip("+~").startswith("agent=") for o in given):
        given.insert(0, DEFAULT_TEXT_AGENT)
    return tuple(given)


_COMPOSING = threading.Lock()


@functools.cache
def tagged_experiment(overrides: tuple[str, ...]) -> tuple[TrainingExperiment, TagProtocol]:
    """The experiment and its tag protocol, composed once per process: a trainer makes an environment or an agent
    loop per trajectory, on many threads (Hydra's global state is not thread-safe)."""
    with _COMPOSING:
        experiment = TrainingExperiment.compose(overrides)
        return experiment, experiment.protocol()
