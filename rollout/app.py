"""Hydra application: compose the config, make it typed, run it."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from rollout.config import RunConfig
from rollout.driver import run
from rollout.errors import RolloutError

logger = logging.getLogger("rollout")


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run(RunConfig.from_hydra(cfg))
    except MissingMandatoryValue as e:
        print(f"error: missing value for {e.full_key}: add {e.full_key}=... to the command line", file=sys.stderr)
        sys.exit(2)
    except RolloutError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
