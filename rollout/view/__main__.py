"""`python -m rollout.view RUN ...` — see `rollout.view.cli`."""

import sys

from rollout.quick_start import collect_less

collect_less()  # before the command's imports (rollout.quick_start)

from rollout.view.cli import main  # noqa: E402

sys.exit(main())
