"""`python -m rollout.gateway --config FILE ...` — see `rollout.gateway.cli`."""

import sys

from rollout.quick_start import collect_less

collect_less()  # before the command's imports (rollout.quick_start)

from rollout.gateway.cli import main  # noqa: E402

sys.exit(main())
