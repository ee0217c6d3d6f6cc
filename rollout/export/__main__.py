"""`python -m rollout.export RUN ...` — see `rollout.export.cli`."""

from rollout.quick_exit import exit_with
from rollout.quick_start import collect_less


def _main() -> int:
    # Imported once the collector's threshold is raised and the quick exit's handler registered, as `rollout export`
    # does (rollout.cli): both forms of the command start and end alike.
    from rollout.export.cli import main

    return main()


if __name__ == "__main__":
    collect_less()
    exit_with(_main)
