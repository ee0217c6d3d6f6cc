"""Data tests never reach the network: Hugging Face offline mode on, and sockets refuse to connect."""

from __future__ import annotations

import socket
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # `datasets` reads these at import time; set the imported values too.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")

    def refuse(self: socket.socket, address: object) -> None:
        raise AssertionError(f"a data test tried to open a network connection to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    datasets.disable_progress_bars()
