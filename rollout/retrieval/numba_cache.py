"""Where numba keeps the BM25 kernels' compiled machine code when the packages' own folders are read-only."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from rollout.paths import default_cache_dir

logger = logging.getLogger(__name__)


def use_project_numba_cache() -> None:
    """Keep compiled kernels under the project's cache dir when the packages' own dirs are read-only.

    numba caches next to a function's source file, else in a per-user dir of its own; a
    deployment with read-only site-packages then finds them under `default_cache_dir()/numba`.
    An explicit NUMBA_CACHE_DIR is left alone.
    """
    import bm25s.numba
    import numba

    if numba.config.CACHE_DIR:
        return
    sources = (Path(bm25s.numba.__file__).parent / "__pycache__", Path(__file__).parent / "__pycache__")
    if all(os.access(source if source.exists() else source.parent, os.W_OK) for source in sources):
        return
    cache_dir = default_cache_dir() / "numba"
    cache_dir.mkdir(parents=True, exist_ok=True)
    numba.config.CACHE_DIR = str(cache_dir)
    logger.debug("numba kernels cached under %s (package dirs are read-only)", cache_dir)
