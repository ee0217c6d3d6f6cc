"""An override interpolating a key the config does not have, refused in one line before Hydra starts.

Hydra resolves `output_dir` into `hydra.run.dir` before the job runs, so `output_dir=/tmp/x/${mode}` (the mode
presets are `@package _global_`: there is no `mode` key) ends in a 25-line traceback of `InterpolationKeyError`.
The roots a `${key}` may start with are known without composing: the top-level keys of `conf/config.yaml`, the
keys the `_global_` presets set, the config groups, `hydra`, and the keys the command line adds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from omegaconf import OmegaConf

from rollout.paths import CONF_DIR

_NODE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")
"""A node interpolation, `${key}` or `${a.b}`; a resolver (`${name:...}`, `${hydra:...}`) has a colon."""
_GLOBAL = "# @package _global_"


def _groups(conf: Path) -> dict[str, bool]:
    """Each config group of `conf` and whether its presets are `@package _global_` (their keys are roots)."""
    groups = {}
    for folder in sorted(p for p in conf.iterdir() if p.is_dir() and p.name != "hydra"):
        presets = sorted(folder.glob("*.yaml"))
        if presets:
            groups[folder.name] = presets[0].read_text(encoding="utf-8").startswith(_GLOBAL)
    return groups


def config_roots(args: Iterable[str] = (), conf: Path = CONF_DIR, config_name: str = "config") -> set[str]:
    """The top-level keys a `${key}` may name in the config `config_name` composed with `args` (the keys they add)."""
    top = OmegaConf.load(conf / f"{config_name}.yaml")
    roots = {str(k) for k in top if k != "defaults"} | {"hydra"}
    groups = _groups(conf)
    for group, is_global in groups.items():
        if not is_global:
            roots.add(group)
            continue
        for preset in (conf / group).glob("*.yaml"):
            roots.update(str(k) for k in OmegaConf.load(preset) if k != "defaults")
    added = (a.partition("=")[0].lstrip("+~").split(".")[0] for a in args if "=" in a and not a.startswith("-"))
    return roots | {root for root in added if root not in groups}  # `mode=sparse` chooses a preset: no `mode` key


def unknown_interpolation(args: Sequence[str], conf: Path = CONF_DIR, config_name: str = "config") -> str | None:
    """Why an override in `args` interpolates a key the config does not have, naming the fix; None when none does."""
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    if not any("${" in a for a in overrides):
        return None
    roots = config_roots(overrides, conf, config_name)
    groups = _groups(conf)
    for arg in overrides:
        for key in _NODE.findall(arg.partition("=")[2]):
            root = key.split(".")[0]
            if root in roots:
                continue
            if root in groups:
                named = f"{root}_name"
                fix = (f"the {root} preset's name is ${{{named}}}" if named in roots else
                       f"the {root} preset's name is ${{hydra:runtime.choices.{root}}}")
                fix += f" (any group's choice: ${{hydra:runtime.choices.GROUP}}), e.g. " + arg.replace(
                    f"${{{key}}}", f"${{{named}}}" if named in roots else f"${{hydra:runtime.choices.{root}}}")
            elif close := difflib.get_close_matches(root, sorted(roots), n=1):
                fix = f"did you mean ${{{close[0]}{key[len(root):]}}}?"
            else:
                fix = f"the keys are {', '.join(sorted(roots))}"
            return f"${{{key}}} in {arg} names no config key, so it cannot be resolved; {fix}"
    return None
