"""A sweep's job folders are named by the keys the sweep varies, not by every override of the command line.

`python -m rollout -m mode=dense,sparse agent=openai llm.base_url=http://127.0.0.1:8000/v1 llm.model=Qwen/...`
gives each job every identity override (`rollout.identity_keys.identity_overrides`): in its config, its
identity and its comparison label alike. Its folder is named by those of the keys given several values alone
(`results/demo/dense`; `-m agent.top_k=1,5` still gives `results/demo/hybrid,agent.top_k=1`), so that folder
names stay short, and rerunning the same sweep finds the same folders. A single run keeps naming its folder by
all of its identity overrides.

Hydra hands a job its own overrides only, one value each (`hydra.overrides.task`), never the sweep's: the app
reads the varied keys from the command line (`swept_keys`) and holds them while Hydra runs the jobs (`sweeping`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

_SWEPT: ContextVar[frozenset[str] | None] = ContextVar("rollout_swept_keys", default=None)
"""The keys the running command's sweep varies; None outside `sweeping` (a config composed by a script or test)."""


def swept_keys(args: Sequence[str]) -> frozenset[str]:
    """The keys the overrides in `args` give several values (`mode=dense,sparse`, `agent.top_k=range(1,4)`,
    `mode=glob(*)`), without their `+`/`~` prefix; none for overrides Hydra cannot read (it says why itself)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return frozenset()
    return frozenset(o.key_or_group for o in parsed if o.is_sweep_override() and _values(o) != 1)


def _values(override: object) -> int | None:
    """How many values a sweep override gives; None when only Hydra's config can say (a `glob`)."""
    try:
        return len(list(override.sweep_string_iterator()))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a glob needs the config's options: it is taken as varying
        return None


@contextmanager
def sweeping(keys: Iterable[str]) -> Iterator[None]:
    """Within the block, the jobs of a sweep (`hydra.mode=MULTIRUN`) name their folders by `keys` alone."""
    token = _SWEPT.set(frozenset(keys))
    try:
        yield
    finally:
        _SWEPT.reset(token)


def folder_parts(parts: Sequence[str]) -> list[str]:
    """The `key=value` identity overrides that name the running job's folder: in a sweep, those of the keys it
    varies; otherwise all of them."""
    keys = _SWEPT.get()
    if keys is None or not in_a_sweep():
        return list(parts)
    return [part for part in parts if part.partition("=")[0] in keys]


def in_a_sweep() -> bool:
    """Whether the running Hydra job is one of a sweep's (`-m`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
