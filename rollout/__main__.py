"""`python -m rollout mode=hybrid` — see conf/config.yaml for every option."""

from rollout.app import main

main()
