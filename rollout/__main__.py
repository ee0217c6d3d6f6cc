"""`python -m rollout mode=hybrid` — see conf/config.yaml for every option."""

import sys

from rollout.quick_start import run_command


def _main() -> int:
    # Imported once the quick exit's handler is registered, so that Ray's own exit handler runs before it.
    from rollout.cli import run_experiment

    return run_experiment(sys.argv[1:])


# Guarded: a BM25 build's tokenizing workers (spawned) import this module again as __mp_main__.
if __name__ == "__main__":
    run_command(_main)
