"""Where the project keeps generated data and index caches."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"


def default_cache_dir() -> Path:
    """`$ROLLOUT_CACHE_DIR`, else `~/.cache/rollout`: generated KBs and indexes, never in git."""
    return Path(os.environ.get("ROLLOUT_CACHE_DIR") or Path.home() / ".cache" / "rollout")
