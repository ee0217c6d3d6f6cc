"""`python -m rollout.view RUN ...` — see `rollout.view.cli`."""

from rollout.quick_start import run_cli

if __name__ == "__main__":
    run_cli("rollout.view.cli")
