"""Errors of the retrieval package; every message says how to fix the problem."""

from __future__ import annotations

from rollout.errors import RolloutError


class RetrievalError(RolloutError):
    """Base class for failures while building, loading or querying an index."""
