"""`python -m rollout.export RUN ...` — see `rollout.export.cli`."""

import sys

from rollout.quick_start import collect_less

collect_less()  # before the command's imports (rollout.quick_start)

from rollout.export.cli import main  # noqa: E402

sys.exit(main())
