"""A run's tool calls, read back and reported: the ledger joined with the trajectory (ledger), the per-tool
report under tool_stats/ (report), whether results reached the model (reach), and tool use over a training run
(use, use_plot)."""
