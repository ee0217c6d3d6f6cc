"""Runs compared: each run scored into its row (run_row), the paired bootstrap against the baseline (paired),
which runs and their names (run_folders), which question set each asked (question_set), the comparison itself
(comparison) and its tables and plots (tables, plot, cost_plot)."""
