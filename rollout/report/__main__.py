"""`python -m rollout.report tool-stats PATH...` and `compare DIR...` — see `rollout.report.cli`."""

from rollout.quick_start import run_cli

if __name__ == "__main__":
    run_cli("rollout.report.cli")
