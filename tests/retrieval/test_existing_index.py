"""Serving a faiss index file built elsewhere (FlashRAG / Search-R1 layout: row i = passage i)."""

from pathlib import Path

import faiss
import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import DenseParams, DenseRetriever
from rollout.retrieval.encoder import TextEncoder

QUERIES = ["birthplace of Ravel", "deepest lake", "who discovered antibiotics"]


def _write(index: faiss.Index, vectors: np.ndarray, path: Path) -> Path:
    index.add(vectors)
    faiss.write_index(index, str(path))
    return path


@pytest.fixture
def fact_vectors(encoder: TextEncoder, facts: list[Passage]) -> np.ndarray:
    """The passages' vectors in corpus order, as an external indexing job would write them."""
    return encoder.encode_passages([p.contents for p in facts])


def test_flat_file_gives_the_same_hits_as_building(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], fact_vectors: np.ndarray
) -> None:
    path = _write(faiss.IndexFlatIP(encoder.dimension), fact_vectors, tmp_path / "e5_Flat.index")
    existing = DenseRetriever.from_existing_index(path, facts, encoder=encoder)
    built = DenseRetriever.build(facts, encoder=encoder)
    assert existing.num_passages == len(facts) and existing.index_type == "flat"
    before, after = built.search(QUERIES, 4), existing.search(QUERIES, 4)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_allclose(before.scores, after.scores, atol=1e-6)
    assert facts[after.indices[0, 0]].title == "Maurice Ravel"


def test_hnsw_file_takes_ef_search_from_params(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], fact_vectors: np.ndarray
) -> None:
    index = faiss.IndexHNSWFlat(encoder.dimension, 8, faiss.METRIC_INNER_PRODUCT)
    path = _write(index, fact_vectors, tmp_path / "e5_HNSW.index")
    existing = DenseRetriever.from_existing_index(path, facts, encoder=encoder, params=DenseParams(ef_search=33))
    assert existing.index_type == "hnsw" and existing.ef_search == 33
    assert facts[existing.search(["deepest lake"], 1).indices[0, 0]].title == "Lake Baikal"


def test_a_count_mismatch_names_both_numbers_and_the_files(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], fact_vectors: np.ndarray
) -> None:
    path = _write(faiss.IndexFlatIP(encoder.dimension), fact_vectors, tmp_path / "e5_Flat.index")
    with pytest.raises(RetrievalError) as info:
        DenseRetriever.from_existing_index(path, facts[:-1], encoder=encoder, corpus_path="wiki.jsonl")
    message = str(info.value)
    assert all(part in message for part in (str(path), "wiki.jsonl", f"{len(facts)} vectors", f"{len(facts) - 1}"))
    assert "index_path" in message


def test_a_width_mismatch_names_both_widths_and_the_model(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], unit_vectors
) -> None:
    path = _write(faiss.IndexFlatIP(8), unit_vectors(len(facts), 8, 0), tmp_path / "small.index")
    with pytest.raises(RetrievalError) as info:
        DenseRetriever.from_existing_index(path, facts, encoder=encoder)
    message = str(info.value)
    assert all(part in message for part in (str(path), "8-d", "384-d", encoder.model_id, "retriever.dense.encoder"))


def test_a_missing_file_names_the_setting(tmp_path: Path, encoder: TextEncoder, facts: list[Passage]) -> None:
    with pytest.raises(RetrievalError, match="retriever.dense.index_path"):
        DenseRetriever.from_existing_index(tmp_path / "nope.index", facts, encoder=encoder)


def test_an_l2_index_is_refused(
    tmp_path: Path, encoder: TextEncoder, facts: list[Passage], fact_vectors: np.ndarray
) -> None:
    path = _write(faiss.IndexFlatL2(encoder.dimension), fact_vectors, tmp_path / "l2.index")
    with pytest.raises(RetrievalError, match="METRIC_INNER_PRODUCT"):
        DenseRetriever.from_existing_index(path, facts, encoder=encoder)
