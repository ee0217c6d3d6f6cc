"""`python -m rollout.gateway --config FILE ...` — see `rollout.gateway.cli`."""

from rollout.quick_start import run_cli

if __name__ == "__main__":
    run_cli("rollout.gateway.cli")
