"""conf/retriever/default.yaml states the retriever's defaults beside the comments that document them; the library's
are `RetrievalParams`' (what `BM25Retriever.build(passages)`, a bare `rollout gateway` and the evaluation use). The
two are one set of values: a default changed in one place only fails here."""

from __future__ import annotations

from dataclasses import fields

from omegaconf import OmegaConf

from rollout.paths import CONF_DIR
from rollout.retrieval.params import RetrievalParams


def test_the_config_file_states_the_library_defaults_and_every_setting():
    stated = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "retriever" / "default.yaml"))
    assert isinstance(stated, dict) and stated.pop("kind") == "all"  # the evaluation's choice, not an index setting
    assert RetrievalParams.from_dict(stated) == RetrievalParams()
    defaults = RetrievalParams()
    for part in fields(RetrievalParams):
        assert sorted(stated[part.name]) == sorted(f.name for f in fields(getattr(defaults, part.name))), part.name
