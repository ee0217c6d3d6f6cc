import sys

from rollout.view.cli import main

sys.exit(main())
