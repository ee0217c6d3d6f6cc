"""Process-wide OpenMP default, applied before faiss or torch load their OpenMP runtimes.

faiss and torch each bring their own OpenMP runtime, each with a thread per core. By default
an idle OpenMP thread spins before it sleeps, so after a torch encode its threads hold the
cores while faiss searches, and the reverse. On this 2-core machine, measured in one process
with other jobs running: encode-then-search of single queries went from ~3 to ~17-22 q/s
with passive waiting, batched flat search after encoding from ~150 to ~700 q/s, and batch
encoding lost nothing. The runtimes read the setting once, when they load, so it has to be
in the environment before `import faiss`; an explicit OMP_WAIT_POLICY is left alone.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if any(name in sys.modules for name in ("faiss", "torch")):
    logger.debug("faiss or torch was imported before rollout.retrieval; their OpenMP threads may spin when idle")
