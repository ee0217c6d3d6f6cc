"""Terminal views of a run: the live progress display and the trajectory viewer (`python -m rollout.view`)."""
