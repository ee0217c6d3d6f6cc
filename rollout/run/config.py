"""Typed run configuration, built once from the composed Hydra config."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationKeyError

from rollout.data import is_source_folder
from rollout.data.dataset import DatasetConfig
from rollout.errors import ConfigError
from rollout.gateway_file import load_gateway_file
from rollout.identity_keys import identity_overrides, run_suffix, shards_change_results
from rollout.llm.sampling_keys import check_sampling_keys
from rollout.logs import parse_verbose
from rollout.paths import CONF_DIR, PROJECT_ROOT, default_cache_dir
from rollout.retrieval.params import RetrievalParams
from rollout.run.sweep_folders import folder_parts
from rollout.wire import MAX_DOCS_PER_CALL

if TYPE_CHECKING:
    from rollout.report.judge.grader import JudgeSettings
    from rollout.report.rescore import ScoringConfig


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """How the run reaches its MCP gateway: conf/config.yaml's `gateway:` block, whose comments document each key
    and whose values are the defaults (written there only)."""

    url: str | None
    host: str | None
    """Address a launched gateway binds; None is 127.0.0.1, or this node's IP when the run joins a Ray cluster
    (workers on other nodes must reach it)."""
    ready_timeout_s: float
    call_timeout_s: float
    default_top_k: int
    max_top_k: int
    default_max_docs: int
    """Documents the document tools return when a call leaves max_files / max_docs out. Part of the run's identity."""
    auth_token: str | None
    """Bearer token the gateway requires and the workers send; None uses `$ROLLOUT_GATEWAY_TOKEN` (or none)."""
    transport: str
    """MCP transport of a launched gateway: `streamable-http` or `sse`."""
    tool_timeout_s: float | None
    """Gateway-side limit per tool call; a call over it is an error result with outcome `timeout`. None uses
    `call_timeout_s`: a call its client stopped waiting for gives its tool group's thread back."""
    threads_per_group: int
    """Worker threads each tool group's calls may use at once on a launched gateway."""
    reconnect_timeout_s: float
    """How long a worker's calls wait for a lost gateway session to come back before failing (`transport_error`)."""
    replicas: int
    """1 launches the gateway as a child process; N > 1 deploys N replicas on Ray Serve behind one URL."""
    replica_cpus: float
    """CPUs Ray reserves for each Serve replica."""
    autoscaling: dict[str, Any] | None
    """Ray Serve `autoscaling_config` for the replicas (min_replicas, max_replicas, target_ongoing_requests, ...)."""
    offline_steps: bool
    """Without an LLM endpoint, the step tools filter with the encoder and answer with the extractive reader;
    False makes filter_documents and generate_answer answer with an error instead. Part of the run's identity."""


@dataclass(frozen=True, slots=True)
class RaySettings:
    """The run's slice for its Ray (`rollout.run.ray_session`), made by `RunConfig.ray`."""

    address: str | None
    """`ray.address`: a cluster to join; None starts a Ray of the run's own."""
    num_cpus: int | None
    verbose: int
    """The run's verbosity, which Ray's own logging and its workers' follow."""
    api_key_env: str | None
    """`llm.api_key_env` of the agent: the variable workers on other nodes need from the driver's environment."""


@dataclass(frozen=True, slots=True)
class WorkerPool:
    """The run's slice for its rollout workers (`rollout.run.scheduler`): how many, and what each is made with; made by
    `RunConfig.worker_pool`."""

    agent: dict[str, Any]
    """Hydra `_target_` spec of the policy, instantiated inside each worker."""
    workers: int
    concurrency_per_worker: int
    task_timeout_s: float | None
    watch: bool
    """Workers keep their tasks' events for the driver to collect."""


@dataclass(frozen=True, slots=True)
class GatewayLaunch:
    """The run's slice for its gateway (`rollout.run.gateway_kinds`): which one, and what a launched one starts with;
    made by `RunConfig.gateway_launch`."""

    gateway: GatewayConfig
    gateway_file: Path
    cache_dir: Path
    output_dir: Path
    retriever: RetrievalParams
    tokenizer: str | None
    step_llm: dict[str, Any] | None
    """The `llm:` block the gateway's step tools ask (`RunConfig.step_llm`); None leaves them offline."""
    sources_root: Path | None
    """The folder of a `dataset.kind=files` corpus read from source files, whose tools read them."""
    verbose: int
    ray: RaySettings
    """The Ray a Serve gateway runs in, and whether the run joins a cluster (a launched gateway then binds the node's
    address)."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything one experiment needs; `run(cfg)` takes only this. Made by `from_hydra` (or `compose_run_config`):
    the defaults are conf/config.yaml's, written there only, beside the comments that document each key."""

    mode_name: str
    gateway_config_path: Path
    output_dir: Path
    dataset: DatasetConfig
    retriever: RetrievalParams
    """Index parameters, handed to the gateway."""
    gateway: GatewayConfig
    agent: dict[str, Any]
    """Hydra `_target_` spec of the policy, instantiated inside each worker."""
    system_prompt: str | None
    workers: int
    concurrency_per_worker: int
    cache_dir: Path
    ray_address: str | None
    ray_num_cpus: int | None
    experiment: str
    task_timeout_s: float | None
    """Wall-clock limit per task; None for none."""
    resume: bool
    """Skip tasks already finished in `output_dir`; False starts the folder over."""
    watch: bool
    """Print every task's events live."""
    progress: bool
    """Show a progress bar (unless `verbose` is -1)."""
    verbose: int
    """Log detail (-v/-q): -1 warnings only, 0 rollout INFO, 1 rollout DEBUG, 2 and 3 libraries too (`rollout.logs`)."""
    repeats: int
    """Attempts at each question (sampling runs differ); part of the run's identity."""
    seed: int
    """Base seed of the run's sampling; repeat r gets seed + r. Part of the run's identity."""
    score_failed: bool
    """Score failed tasks (error, timeout, infra_error) as wrong answers instead of leaving them out."""
    tokenizer: str | None
    """Tokenizer of the gateway's token budgets and context counts (None: the bundled encoder's). Part of the
    run's identity."""
    llm: dict[str, Any] | None
    """The `llm:` block; the gateway's filter and answer tools use it when `llm.model` is set."""
    judge: dict[str, Any] | None
    """The `judge:` block; with `judge.model` set, the run's answers are judged at its end (`judge_settings`)."""
    overrides: tuple[str, ...]
    """The command-line overrides that change the run's identity (they name the default output folder)."""
    scorers: tuple[str, ...]
    """`scoring.scorers`: the user's own scorers (`package.module:function`, `rollout.report.user_scorers`). Not
    part of the run's identity: scoring again is not running again."""

    @classmethod
    def from_hydra(cls, cfg: DictConfig) -> RunConfig:
        try:
            c = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except InterpolationKeyError as e:
            what = e.msg.splitlines()[0]
            raise ConfigError(f"{what} (in {e.full_key}): interpolate a key the config has, e.g. ${{mode_name}} or "
                              "${hydra:runtime.choices.mode} for the mode (python -m rollout --cfg job lists them)"
                              ) from None
        assert isinstance(c, dict)
        try:
            ds, rt = c["dataset"], c["retriever"]
            run = cls(
                mode_name=str(c["mode_name"]),
                gateway_config_path=resolve_project_path(c["gateway_config_path"]),
                output_dir=Path(c["output_dir"]),
                dataset=DatasetConfig.from_dict(ds),
                retriever=RetrievalParams.from_dict(rt),
                gateway=_gateway_config(c["gateway"]),
                agent=dict(c["agent"]),
                system_prompt=c["system_prompt"],
                workers=int(c["workers"]),
                concurrency_per_worker=int(c["concurrency_per_worker"]),
                cache_dir=Path(c["cache_dir"]) if c["cache_dir"] else default_cache_dir(),
                ray_address=c["ray"]["address"],
                ray_num_cpus=c["ray"]["num_cpus"],
                experiment=str(c["experiment"]),
                task_timeout_s=float(c["task_timeout_s"]) if c["task_timeout_s"] else None,
                resume=bool(c["resume"]),
                watch=bool(c["watch"]),
                progress=bool(c["progress"]),
                verbose=parse_verbose(c["verbose"]),
                repeats=int(c["repeats"]),
                seed=int(c["seed"]),
                score_failed=bool(c["score_failed"]),
                tokenizer=c["tokenizer"],
                llm=c["llm"],
                judge=c["judge"],
                overrides=tuple(_job_identity_overrides(c["agent"], c["gateway_config_path"], rt)),
                scorers=_scorers(c["scoring"]),
            )
        except TypeError as e:
            raise ConfigError(f"unexpected config key: {e}. Check your overrides against conf/") from e
        except KeyError as e:  # conf/config.yaml sets every key: a config of one's own left this one out
            raise ConfigError(f"the config has no key {e.args[0]!r}, which conf/config.yaml sets: drop the ~KEY "
                              "override that removed it, or keep in a config of your own every key python -m rollout "
                              "--cfg job shows") from None
        if run.workers < 1 or run.concurrency_per_worker < 1:
            raise ConfigError("workers and concurrency_per_worker must be at least 1")
        if run.repeats < 1:
            raise ConfigError(f"repeats={run.repeats} must be at least 1 (the attempts at each question)")
        if not 1 <= run.gateway.default_max_docs <= MAX_DOCS_PER_CALL:
            raise ConfigError(f"gateway.default_max_docs={run.gateway.default_max_docs} must be between 1 and "
                              f"{MAX_DOCS_PER_CALL} (the most documents one call returns); set e.g. "
                              "gateway.default_max_docs=10")
        if run.gateway.replicas < 1:
            raise ConfigError(f"gateway.replicas={run.gateway.replicas} must be at least 1")
        if run.retriever.dense.serve and run.gateway.replicas < 2:
            raise ConfigError("retriever.dense.serve=true deploys the dense shards on Ray Serve beside gateway "
                              "replicas on Ray Serve: set gateway.replicas=2 or more (with ray.address=auto on a "
                              "cluster), or retriever.dense.serve=false to search the shards in the gateway's process")
        if run.gateway.replicas > 1 and run.gateway.url:
            raise ConfigError("gateway.replicas applies to a gateway the run starts, and gateway.url names one "
                              "already running: drop one of the two")
        for block in ("llm", "judge"):  # a misspelled sampling key is refused, not sent and ignored
            check_sampling_keys((c.get(block) or {}).get("sampling"), f"{block}.sampling")
        run.judge_settings()  # a bad judge: block fails here, before the run
        _check_prompt_used(run.system_prompt)
        return run

    def judge_settings(self) -> JudgeSettings | None:
        """The judge the run ends with, when `judge.model` is set; a wrong `judge:` block is a `ConfigError`."""
        if not (self.judge or {}).get("model"):
            return None
        # Imported only for a judged run: the judge's LLM client (openai) is most of a run's start-up imports.
        from rollout.report.judge.grader import JudgeSettings

        return JudgeSettings.from_config(self.judge)

    def scoring_config(self) -> ScoringConfig:
        """How the run's answers are scored (`rollout.report.rescore`)."""
        from rollout.report.rescore import ScoringConfig  # imported when used: the report package loads with it

        return ScoringConfig(mode=self.mode_name, gateway_file=str(self.gateway_config_path),
                             score_failed=self.score_failed, scorers=self.scorers,
                             max_turns=self.agent.get("max_turns"))

    @property
    def ray(self) -> RaySettings:
        llm = self.agent.get("llm")
        return RaySettings(self.ray_address, self.ray_num_cpus, self.verbose,
                           llm.get("api_key_env") if isinstance(llm, dict) else None)

    @property
    def worker_pool(self) -> WorkerPool:
        return WorkerPool(self.agent, self.workers, self.concurrency_per_worker, self.task_timeout_s, self.watch)

    @property
    def gateway_launch(self) -> GatewayLaunch:
        corpus = self.dataset.corpus.path
        sources = self.dataset.kind == "files" and corpus and is_source_folder(corpus)
        return GatewayLaunch(self.gateway, self.gateway_config_path, self.cache_dir, self.output_dir, self.retriever,
                             self.tokenizer, self.step_llm(), Path(corpus).resolve() if sources else None,
                             self.verbose, self.ray)

    def step_llm(self) -> dict[str, Any] | None:
        """The `llm:` block the gateway's step tools ask: set when `llm.model` is and the gateway file serves a
        group that asks an LLM (`STEP_LLM_GROUPS`); None leaves them offline."""
        if not (self.llm or {}).get("model"):
            return None
        return self.llm if load_gateway_file(self.gateway_config_path).uses_step_llm else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["gateway"].get("auth_token"):
            d["gateway"]["auth_token"] = "***"  # config.yaml lands in the result folder; the secret does not
        d["scoring"] = {"scorers": list(d.pop("scorers"))}  # as conf/config.yaml names it
        return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


def _gateway_config(block: dict[str, Any]) -> GatewayConfig:
    """The `gateway:` block; a key it lacks is a `KeyError` naming it (`from_hydra` makes it one line)."""
    for f in fields(GatewayConfig):
        if f.name not in block:
            raise KeyError(f"gateway.{f.name}")
    return GatewayConfig(**block)


def _scorers(scoring: Any) -> tuple[str, ...]:
    """`scoring.scorers` as a tuple of names; a `ConfigError` when it is not a list of them."""
    scorers = (scoring or {}).get("scorers") if isinstance(scoring, dict) else scoring
    if scorers is None:
        return ()
    if isinstance(scorers, str) or not isinstance(scorers, list | tuple):
        raise ConfigError(f"scoring.scorers={scorers!r} must be a list, e.g. "
                          "'scoring.scorers=[rollout.report.example_scorers:gold_share]'")
    return tuple(str(s) for s in scorers)


def resolve_project_path(path: str | Path) -> Path:
    """A path as given when it exists from the working directory, else relative to the project."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    candidate = PROJECT_ROOT / p
    return candidate if candidate.exists() else p


def _job_overrides() -> list[str]:
    """The running Hydra job's command-line overrides; none outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _check_prompt_used(system_prompt: str | None) -> None:
    """A `ConfigError` when `prompt=NAME` was given but the run's system prompt is not NAME's: a mode file that writes
    its own `system_prompt:` (merged after the prompt group), or a `system_prompt=` override, took its place."""
    chosen = [o.partition("=")[2] for o in _job_overrides() if o.partition("=")[0].lstrip("+~") == "prompt"]
    path = CONF_DIR / "prompt" / f"{chosen[-1]}.yaml" if chosen else None
    if path is None or not path.is_file():  # no choice, or a prompt from a search path of the user's own
        return
    if OmegaConf.load(path).get("system_prompt") != system_prompt:
        raise ConfigError(f"prompt={chosen[-1]} would not be used: the mode's file writes its own system_prompt "
                          "(or system_prompt= is given), which replaces it. Drop prompt=, or have the mode pick its "
                          "prompt with `defaults: [override /prompt: NAME, _self_]` instead of writing system_prompt")


def _job_identity_overrides(agent: Any, gateway_config_path: Any = None, retriever: Any = None) -> list[str]:
    """The job's identity overrides; `llm.*` count when the agent or the gateway file's step tools use the LLM,
    `retriever.dense.shards` when the dense index is approximate (`shards_change_results`)."""
    uses_llm = isinstance(agent, dict | DictConfig) and "llm" in agent
    if not uses_llm and gateway_config_path:
        try:
            uses_llm = load_gateway_file(resolve_project_path(str(gateway_config_path))).uses_step_llm
        except ConfigError:
            pass  # a missing or bad gateway file is reported when the run starts, with its fix
    dense = retriever.get("dense") if isinstance(retriever, dict | DictConfig) else None
    return identity_overrides(_job_overrides(), uses_llm=uses_llm, shards_count=shards_change_results(dense))


def _run_suffix_resolver(*, _root_: DictConfig) -> str:
    """`${run_suffix:}` in conf/config.yaml: the default output folder's `,key=value` part for this job.

    Not Hydra's `override_dirname`: its `exclude_keys` is a fixed list of exact keys, while a folder
    must name exactly the identity overrides, which are prefix rules and depend on the agent (`llm.*`);
    in a sweep, only those of the keys it varies (`rollout.run.sweep_folders`).
    """
    return run_suffix(folder_parts(_job_identity_overrides(_root_.get("agent"), _root_.get("gateway_config_path"),
                                                           _root_.get("retriever"))))


OmegaConf.register_new_resolver("run_suffix", _run_suffix_resolver, replace=True)


def compose_run_config(*overrides: str) -> RunConfig:
    """The config `python -m rollout OVERRIDES...` would run with (for scripts, benchmarks and tests)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    earlier = hydra_config.cfg
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    # As in a real job: the output folder's name comes from these overrides, read through HydraConfig.
    hydra_config.set_config(cfg)
    try:
        with open_dict(cfg):
            del cfg["hydra"]
        return RunConfig.from_hydra(cfg)
    finally:
        hydra_config.cfg = earlier


def compose_without_corpus(overrides: Sequence[str]) -> RunConfig:
    """The config these overrides compose for what reads the questions but not the corpus (RL prompts, a trainer):
    a dataset config that leaves its corpus path to fill in (???) composes without it. Hydra's refusal is a
    `ConfigError` with its message on one line."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    given = list(overrides)
    if not any(o.lstrip("+~").startswith("dataset.corpus") for o in overrides):
        given.append("++dataset.corpus.path=null")
    try:
        return compose_run_config(*given)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(hydra_error_line(e)) from e


def hydra_error_line(e: Exception) -> str:
    """Hydra's message on one line: its first line, and the options it lists for an unknown group option."""
    lines = [line.strip() for line in str(e).split("Config search path:")[0].splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    head, *rest = lines
    if rest and rest[0].startswith("Available options"):
        return f"{head}; options: {', '.join(rest[1:])}"
    return head
