"""`python -m rollout.report tool-stats PATH...` and `compare DIR...` — see `rollout.report.cli`."""

from rollout.quick_start import collect_less

collect_less()  # before the command's imports (rollout.quick_start)

from rollout.report.cli import main  # noqa: E402

raise SystemExit(main())
