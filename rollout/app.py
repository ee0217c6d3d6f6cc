"""Hydra application: compose the config, make it typed, run it."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from rollout.config import RunConfig
from rollout.driver import run
from rollout.errors import RolloutError, RunInterrupted
from rollout.paths import CONF_DIR

logger = logging.getLogger("rollout")


# An absolute path: under `python -m`, Hydra would resolve a relative one as a Python module.
@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    # Per-request lines from the HTTP client would bury the run's own log.
    for name in ("httpx", "httpx2"):  # httpx2: the client newer mcp and openai releases use
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        run(RunConfig.from_hydra(cfg))
    except MissingMandatoryValue as e:
        print(f"error: missing value for {e.full_key}: add {e.full_key}=... to the command line", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as e:
        print(f"stopped: {e}", file=sys.stderr)
        sys.exit(130)
    except RolloutError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
