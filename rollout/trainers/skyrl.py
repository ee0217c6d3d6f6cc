"""rollout's experiment as a SkyRL-gym environment: `skyrl_gym.make("rollout", env_config=..., extras=row)`.

Importing this module registers the environment under the id `rollout`. SkyRL's generator makes one environment
per trajectory with `skyrl_gym.make(environment.env_class, env_config=environment.skyrl_gym.<env_class>,
extras=<the row's other columns>)`, in the process of its training entrypoint (the `skyrl_entrypoint` Ray task),
so that is where this module must be imported: see docs/trainers.md, "SkyRL".

An episode is one question under the experiment's tag protocol (`agent=search_r1` unless it names another; one
with two search tags such as `agent=search_r1_hybrid` routes each tag to its own tool), its searches made on a running
gateway through the trajectory's own MCP session (`ToolSession`: opened at `init`, closed when the episode ends or
at `close`), every call in the gateway's ledger as training traffic. `step` reads one policy turn with
`TextEpisode`, so observations are the protocol's information block or its feedback, as the evaluated agent reads
them; the answer is rewarded with rollout's scorer, and `agent.max_turns` bounds the episode as in an evaluation.

SkyRL calls `init`, `step` and `close` synchronously, on its env worker threads. The MCP client is async, so every
environment of a process runs its session on one event loop owned by this module, on one daemon thread started
when first needed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
)
from skyrl_gym.envs.registration import register, registry

from rollout.errors import ConfigError
from rollout.records import ToolCallRecord
from rollout.trainers.experiment import tagged_experiment, text_policy_overrides
from rollout.trainers.reward import (
    DEFAULT_METRIC,
    golden_answers,
    metric_function,
    row_ground_truth,
)
from rollout.trainers.text_episode import TextEpisode, Turn
from rollout.trainers.tool_session import GatewayTarget, ToolSession
from rollout.wire import TOKEN_ENV

logger = logging.getLogger(__name__)

ENV_ID = "rollout"
"""The id SkyRL names the environment by: `environment.env_class=rollout`."""
T = TypeVar("T")
_WARNED: set[str] = set()
"""The warnings given in this process (each once: SkyRL makes thousands of environments)."""


@dataclass
class RolloutEnvConfig:
    """The environment's settings: SkyRL's `environment.skyrl_gym.rollout.*` (or a mapping with these keys)."""

    experiment: str = ""
    """rollout's Hydra overrides naming the experiment, as typed after `python -m rollout` and split as the shell
    splits them (a list is taken too): `mode=hybrid agent=search_r1_hybrid dataset=nq ...`. The gateway file and
    the agent's protocol, top_k and max_turns are read from it; without `agent=`, the agent is `search_r1`."""
    gateway_url: str = "http://127.0.0.1:8080/mcp"
    """The running gateway's MCP URL; it must serve the experiment's gateway file."""
    token_env: str = TOKEN_ENV
    """The environment variable holding the gateway's bearer token (unset or empty: no token)."""
    metric: str = DEFAULT_METRIC
    """The reward: em, f1 or contains, the evaluation's metric of that name."""

    @classmethod
    def of(cls, env_config: Any) -> RolloutEnvConfig:
        """The settings SkyRL hands over: this dataclass, a mapping (an OmegaConf DictConfig among them), or none."""
        if isinstance(env_config, cls):
            return env_config
        if env_config is None:
            return cls()
        if isinstance(env_config, Mapping):
            given = {str(k): env_config[k] for k in env_config}
        else:  # another dataclass with the same fields (a config class of the trainer's own)
            given = {k: getattr(env_config, k) for k in cls.__dataclass_fields__ if hasattr(env_config, k)}
        if unknown := sorted(set(given) - set(cls.__dataclass_fields__)):
            raise ConfigError(f"environment.skyrl_gym.{ENV_ID} has unknown key(s) {', '.join(unknown)}; it takes "
                              f"{', '.join(cls.__dataclass_fields__)}")
        return cls(**given)

    @property
    def overrides(self) -> tuple[str, ...]:
        """The experiment's overrides, `agent=search_r1` first when they name no agent (a run's default agent
        calls tools natively and speaks no tag protocol)."""
        return text_policy_overrides(self.experiment)


class _EventLoopThread:
    """One asyncio loop on one daemon thread for the whole process, where every environment's MCP session lives
    (the session's owner task and its calls must share a loop). Started when first needed; a forked child starts
    its own, as the parent's thread does not exist there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop and wait for its result (a tool call's own timeouts bound the wait)."""
        return self.submit(coroutine).result()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coroutine` on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running())

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def is_running(self) -> bool:
        """The loop runs in this process (not only in the one this process was forked from)."""
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="rollout-skyrl-env-loop",
                                                daemon=True)
                self._thread.start()
                self._pid = os.getpid()
            return self._loop


LOOP = _EventLoopThread()


class RolloutEnv(BaseTextEnv):
    """One question of the experiment, one policy turn per `step`."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        extras = extras or {}
        self.settings = RolloutEnvConfig.of(env_config)
        metric_function(self.settings.metric)  # an unknown metric is refused before any episode runs
        self.experiment, self.protocol = tagged_experiment(self.settings.overrides)
        self.max_turns = self.experiment.max_turns
        _check_trainer_max_turns(extras.get("max_turns"), self.max_turns)
        self.golden_answers = golden_answers(row_ground_truth(extras))
        info = extras.get("extra_info") if isinstance(extras.get("extra_info"), Mapping) else {}
        self.question_id = str(info["id"]) if info.get("id") is not None else None
        self.question = str(info["question"]) if info.get("question") is not None else None
        step = extras.get("global_step")
        self.step_number = int(step) if step is not None else None
        """The trainer's step, kept in the ledger with each call. SkyRL 0.4.0 passes none to its environments; a
        generator that adds `global_step` to the extras has it recorded."""
        self.trajectory_id = f"{self.question_id or 'trajectory'}-{uuid.uuid4().hex[:8]}"
        self.session: ToolSession | None = None
        self.episode: TextEpisode | None = None
        self.last: Turn | None = None
        self.calls: list[ToolCallRecord] = []

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Open the trajectory's MCP session; the prompt (the row's, as `rollout export --format verl-rl` wrote it
        from the same experiment) goes to the policy unchanged."""
        self._check_prompt(prompt)
        self.close()  # a second init starts over
        target = GatewayTarget(self.settings.gateway_url, self.experiment.gateway_file,
                               token=os.environ.get(self.settings.token_env, ""))
        session = ToolSession(target, self.trajectory_id, step=self.step_number, worker_id=f"skyrl-{os.getpid()}")
        LOOP.run(session.open())
        self.session, self.calls = session, session.calls
        try:
            routes = self.protocol.routes(session.tool_specs, self.experiment.top_k)
        except ConfigError:
            self.close()
            raise
        self.episode = TextEpisode(self.protocol, routes, session, self.golden_answers, top_k=self.experiment.top_k,
                                   max_turns=self.max_turns, metric=self.settings.metric)
        return prompt, {"question_id": self.question_id, "trajectory_id": self.trajectory_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.episode is None:
            raise RuntimeError("init() opens the episode: call it before step()")
        # SkyRL's inference engines keep the stop string in the output, and the environment is not told why a
        # generation ended: a turn is read as written, so one cut inside a tag is an invalid turn, never a search.
        turn = LOOP.run(self.episode.step(action, stopped=False))
        self.turns, self.last = self.episode.turns, turn
        if turn.done:
            self.close()
        observations = [{"role": "user", "content": turn.observation}] if turn.observation else []
        metadata: dict[str, Any] = {"kind": turn.kind}
        if turn.tool_call is not None:
            metadata.update(tool_name=turn.tool_call["name"], tool_input=turn.tool_call["arguments"],
                            ok=turn.tool_call["ok"])
        if turn.answer is not None:
            metadata["answer"] = turn.answer
        return BaseTextEnvStepOutput(observations=observations, reward=turn.reward, done=turn.done, metadata=metadata)

    def close(self) -> None:
        """End the episode's MCP session (again: nothing)."""
        session, self.session = self.session, None
        if session is not None:
            LOOP.run(session.close())

    def __del__(self) -> None:
        # SkyRL closes an environment when its trajectory ends, but not when the trajectory raised: the session is
        # then closed when the environment is collected, without waiting for it.
        session, self.session = getattr(self, "session", None), None
        if session is not None and LOOP.is_running():
            LOOP.submit(session.close())

    def get_metrics(self) -> dict[str, Any]:
        """The episode's numbers, averaged over episodes by SkyRL."""
        return {"turns": self.turns, "tool_calls": len(self.calls),
                "failed_tool_calls": sum(1 for c in self.calls if not c.ok),
                "answered": float(self.last is not None and self.last.kind == "answer")}

    def _check_prompt(self, prompt: ConversationType) -> None:
        """Warn (once per process) when the row's prompt is not this experiment's opening: a policy shown another
        protocol's tags would write turns this one reads as invalid."""
        if self.question is None or "prompt" in _WARNED:
            return
        users = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users and users[-1] != self.protocol.instruction(question=self.question):
            _WARNED.add("prompt")
            logger.warning("the prompt of question %s is not the opening of experiment %s: export the rows with the "
                           "same overrides (rollout export --questions %s --format verl-rl --out FILE)",
                           self.question_id, " ".join(self.experiment.overrides) or "(the demo)",
                           " ".join(self.experiment.overrides))


def _check_trainer_max_turns(trainer_max_turns: Any, max_turns: int) -> None:
    """SkyRL puts `generator.max_turns` into every row's extras; the experiment's `agent.max_turns` is what bounds an
    episode (as it bounds an evaluation's task), so a different value is pointed out once per process."""
    if trainer_max_turns is None or int(trainer_max_turns) == max_turns or "max_turns" in _WARNED:
        return
    _WARNED.add("max_turns")
    logger.warning("generator.max_turns=%s, but episodes end at the experiment's agent.max_turns=%s, as evaluated "
                   "tasks do: set generator.max_turns=%s (or agent.max_turns in the experiment)", trainer_max_turns,
                   max_turns, max_turns)


def register_env() -> None:
    """Register `RolloutEnv` with skyrl-gym as `rollout` (again: nothing)."""
    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point=f"{__name__}:RolloutEnv")


register_env()
