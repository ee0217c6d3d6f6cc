"""Errors raised while reading or generating corpora and question sets."""

from __future__ import annotations

from rollout.errors import RolloutError


class DataError(RolloutError):
    """A corpus or question file cannot be used; the message names the file and the expected format."""
