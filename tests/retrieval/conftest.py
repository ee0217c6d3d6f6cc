"""Shared fixtures: small corpora built in code (the session's torch encoder is tests.conftest.encoder)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rollout.records import Passage

FACTS: list[tuple[str, str]] = [
    ("Maurice Ravel", "Maurice Ravel was born in Ciboure, a Basque town near the Spanish border, in 1875."),
    ("Bolero", "Ravel composed Bolero in 1928 as a ballet score for the dancer Ida Rubinstein."),
    ("Glacier Express", "The Glacier Express is a scenic train running between Zermatt and St. Moritz."),
    ("Device VX-1234", "The VX-1234 is a handheld spectrometer sold to field geologists."),
    ("Honeybees", "Honeybees communicate the direction of food sources with a waggle dance."),
    ("Lake Baikal", "Lake Baikal in Siberia is the deepest freshwater lake on Earth."),
    ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar and oxygen."),
    ("Chess", "The Sicilian Defence is the most popular answer to the opening move e4."),
    ("Volcanoes", "Mount Etna on Sicily is one of the most active volcanoes in Europe."),
    ("Printing press", "Johannes Gutenberg introduced movable type printing to Europe around 1440."),
    ("Penicillin", "Alexander Fleming noticed in 1928 that a mould killed bacteria in his dishes."),
    ("Marathon", "The marathon distance was fixed at 42.195 kilometres in 1921."),
]

_WORDS = (
    "river castle engine apple violin harbor desert comet forest copper lantern meadow "
    "glacier orchard pilot quartz saddle temple tundra velvet willow yacht zebra anchor"
).split()


def _random_passages(n: int, seed: int) -> list[Passage]:
    """Passages of random words from a small vocabulary, so terms repeat across passages."""
    rng = np.random.default_rng(seed)
    passages = []
    for i in range(n):
        words = rng.choice(_WORDS, size=int(rng.integers(3, 25)))
        passages.append(Passage(id=f"rand-{i}", title=str(words[0]).title(), text=" ".join(words[1:])))
    return passages


def _random_queries(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(_WORDS, size=int(rng.integers(1, 5)))) for _ in range(n)]


def _unit_vectors(n: int, dimension: int, seed: int) -> np.ndarray:
    """Random float32 rows of length one, for index tests that need no encoder."""
    vectors = np.random.default_rng(seed).standard_normal((n, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def facts() -> list[Passage]:
    """Hand-written passages with one distinctive topic each."""
    return [Passage(id=f"fact-{i}", title=title, text=text) for i, (title, text) in enumerate(FACTS)]


@pytest.fixture
def random_passages() -> Callable[[int, int], list[Passage]]:
    """Factory `(n, seed)` for passages of random words from a small vocabulary."""
    return _random_passages


@pytest.fixture
def random_queries() -> Callable[[int, int], list[str]]:
    """Factory `(n, seed)` for queries of one to four words from the same vocabulary."""
    return _random_queries


@pytest.fixture
def unit_vectors() -> Callable[[int, int, int], np.ndarray]:
    """Factory `(n, dimension, seed)` for random unit-length float32 rows."""
    return _unit_vectors
