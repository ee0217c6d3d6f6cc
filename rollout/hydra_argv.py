"""Run a `@hydra.main` app on an argument list of our choosing: Hydra reads its command line only from sys.argv.

Hydra knows no `-v`/`-q`; `verbosity_overrides` turns them into the `verbose=N` override both apps'
configs have, so `python -m rollout -v mode=sparse` and `rollout eval-retrieval -q` read as people expect.
`hydra_command` makes a whole command of one job on one config of conf/ (`rollout build-index`, `eval-retrieval`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rollout.errors import ConfigError, RolloutError

_FLAG = re.compile(r"-(v+|q+)")


def verbosity_overrides(args: Sequence[str]) -> list[str]:
    """`args` with `-v`, `-vv`, `--verbose`, `-q`, `--quiet` replaced by one `verbose=N` override.

    Counted as pip counts them: each `v` adds one, each `q` takes one away (`-q` is -1, `-vv` 2). Flags
    together with a `verbose=` override are refused: one of the two would be ignored."""
    rest, level, flags = [], 0, []
    for arg in args:
        if match := _FLAG.fullmatch(arg):
            letters = match.group(1)
            level += len(letters) if letters[0] == "v" else -len(letters)
        elif arg in ("--verbose", "--quiet"):
            level += 1 if arg == "--verbose" else -1
        else:
            rest.append(arg)
            continue
        flags.append(arg)
    if not flags:
        return rest
    if given := [a for a in rest if a.partition("=")[0].lstrip("+~") == "verbose"]:
        raise ConfigError(f"{' '.join(flags)} and {given[0]} both set the log detail: keep one of them")
    # Beside the other overrides: Hydra's parser takes its positional overrides as one run of arguments.
    at = next((i for i, a in enumerate(rest) if "=" in a and not a.startswith("-")), 0)
    return [*rest[:at], f"verbose={level}", *rest[at:]]


@contextmanager
def hydra_argv(args: Sequence[str], prog: str | None = None) -> Iterator[None]:
    """`sys.argv` is `[prog, *args]` inside the block (prog: the name usage lines show), as before after it.

    `-v`/`-q` in `args` become `verbose=N` (`verbosity_overrides`); a contradiction is one line and exit code 2."""
    try:
        args = verbosity_overrides(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    saved = sys.argv
    sys.argv = [prog or (saved[0] if saved else "rollout"), *args]
    try:
        yield
    finally:
        sys.argv = saved


def hydra_command(config_name: str, job: Callable[[Any], None]) -> Callable[..., None]:
    """`main(argv=None, *, prog=None)` of a command that runs `job` on conf/`config_name`.yaml composed with the
    overrides in `argv` (sys.argv's by default; `-v`/`-q` read as `verbose=N`, which sets the log detail before the
    job starts). A `RolloutError` the job raises is one line on stderr and exit code 2."""
    import hydra

    from rollout.logs import apply_verbosity, parse_verbose
    from rollout.paths import CONF_DIR

    @hydra.main(version_base=None, config_path=str(CONF_DIR), config_name=config_name)
    def hydra_main(cfg: Any) -> None:
        try:
            apply_verbosity(parse_verbose(cfg.get("verbose", 0)))  # the format is Hydra's job logging (conf/hydra)
            job(cfg)
        except RolloutError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> None:
        with hydra_argv(list(sys.argv[1:] if argv is None else argv), prog):
            hydra_main()

    return main
