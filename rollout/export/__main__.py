"""`python -m rollout.export RUN ...` — see `rollout.export.cli`."""

from rollout.quick_start import run_cli

if __name__ == "__main__":
    run_cli("rollout.export.cli")
