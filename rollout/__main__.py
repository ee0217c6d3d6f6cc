"""`python -m rollout mode=hybrid` — see conf/config.yaml for every option."""

from rollout.run.app import main

main()
