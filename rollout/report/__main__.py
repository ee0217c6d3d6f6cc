"""`python -m rollout.report tool-stats PATH...` and `compare DIR...` — see `rollout.report.cli`."""

from rollout.report.cli import main

raise SystemExit(main())
