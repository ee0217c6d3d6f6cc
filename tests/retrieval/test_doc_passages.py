"""Passages of long documents as views for a dense index that ranks the documents (retriever.dense.passage_tokens):
exact slices cut as chunking cuts them, cached spans, rows ranked by their best passage, and what that finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rollout.data.chunking import iter_chunks
from rollout.errors import RetrievalError
from rollout.records import Passage
from rollout.retrieval import load_or_build_indexes
from rollout.retrieval.base import Hits
from rollout.retrieval.cache import corpus_fingerprint
from rollout.retrieval.doc_passages import BestPassageRetriever, passage_view, token_spans
from rollout.retrieval.params import RetrievalParams

FILLER = ("orchard valley council river market bridge mill lantern quarry tower garden charter meadow canal "
          "granary pasture signal museum parish estate").split()


def words(n: int, start: int = 0) -> str:
    return " ".join(FILLER[(start + i) % len(FILLER)] for i in range(n))


@pytest.mark.parametrize("text", ["a b c", "  lead\tand\n\ntrail  ", "é ü\u00a0nbsp\u2003em \x1c sep", "", "   "])
def test_tokens_are_the_ones_str_split_finds(text):
    starts, ends = token_spans(text)
    assert [text[s:e] for s, e in zip(starts, ends, strict=True)] == text.split()


@pytest.mark.parametrize(("tokens", "overlap"), [(4, 0), (4, 1), (7, 3), (50, 0)])
def test_passages_are_the_chunks_chunk_tokens_cuts_as_slices_of_the_document(tmp_path, tokens, overlap):
    docs = [Passage("long", "Title", "alpha  beta\ngamma\n\ndelta " + words(30) + "\tomega"),
            Passage("short", "Other", "just three words")]
    view = passage_view(docs, corpus_fingerprint(docs), tmp_path, tokens, overlap)
    expected = [c for d in docs for c in iter_chunks(d, max_tokens=tokens, overlap=overlap)]
    assert list(view) == expected == [view[i] for i in range(len(view))]
    for p in view:  # each a slice of its document, whitespace inside kept
        assert p.text in docs[0 if p.source_id == "long" else 1].text
    assert view[-1] == docs[1]  # a short document is its own one passage


def test_spans_are_cached_per_corpus_and_settings(tmp_path):
    docs = [Passage("d", "", words(25))]
    first = passage_view(docs, corpus_fingerprint(docs), tmp_path, 10)
    assert len(list(tmp_path.glob("passages-*"))) == 1
    again = passage_view(docs, corpus_fingerprint(docs), tmp_path, 10)
    assert again.fingerprint == first.fingerprint and list(again) == list(first)
    other = passage_view(docs, corpus_fingerprint(docs), tmp_path, 5)
    edited = [Passage("d", "", words(25, start=1))]
    changed = passage_view(edited, corpus_fingerprint(edited), tmp_path, 10)
    assert len({first.fingerprint, other.fingerprint, changed.fingerprint}) == 3
    assert len(list(tmp_path.glob("passages-*"))) == 3


class Scripted:
    """A passage index answering every query with one fixed ranking of passages."""

    name = "dense"

    def __init__(self, ranking: list[int], scores: list[float]) -> None:
        self.ranking, self.scores, self.depths = ranking, scores, []

    def search(self, queries, k):
        self.depths.append(k)
        rows = (self.ranking + [-1] * k)[:k]
        scores = (self.scores + [float("-inf")] * k)[:k]
        return Hits(np.array([rows] * len(queries), dtype=np.int64), np.array([scores] * len(queries), np.float32))


def test_rows_rank_by_their_best_passage_each_once_searching_deeper_when_needed(tmp_path):
    docs = [Passage("a", "", words(400)), Passage("b", "", words(10)), Passage("c", "", words(40))]
    view = passage_view(docs, corpus_fingerprint(docs), tmp_path, 10)  # a: passages 0-39, b: 40, c: 41-44
    ranking = [*range(40), 42, 40, 41, 43, 44]  # every passage of "a" first, then one of "c", then "b"
    index = Scripted(ranking, [1.0 - i / 100 for i in range(len(ranking))])
    hits = BestPassageRetriever(index, view).search(["q"], 3)
    assert hits.indices.tolist() == [[0, 2, 1]]
    assert hits.scores[0].tolist() == pytest.approx([1.0, 0.60, 0.59])
    assert index.depths == [32, 45]  # the first 32 passages held one row: all of them looked at next
    assert BestPassageRetriever(index, view).num_passages == 3


def test_passages_need_an_index_rollout_encodes():
    with pytest.raises(RetrievalError, match="passage_tokens=null"):
        RetrievalParams.from_dict({"dense": {"passage_tokens": 100, "index_path": "/x.faiss"}})
    with pytest.raises(RetrievalError, match="passage_overlap"):
        RetrievalParams.from_dict({"dense": {"passage_tokens": 10, "passage_overlap": 10}})


def test_a_fact_deep_in_a_document_is_found_through_its_passages_only(tmp_path: Path, encoder):
    # Each document opens on the same 300 words; only one says, 250 words in, what the query asks.
    opening = words(300)
    fact = "The lighthouse keeper of Port Avelin painted the lamp room violet every winter."
    docs = [Passage(f"d{i}", "", opening + " " + (fact if i == 2 else words(30, start=i)) + " " + words(40, start=i))
            for i in range(4)]
    query = "Who painted the lighthouse lamp room violet?"
    whole = load_or_build_indexes(docs, tmp_path, which=["dense"], encoder=encoder)["dense"]
    params = RetrievalParams.from_dict({"dense": {"passage_tokens": 60}})
    passages = load_or_build_indexes(docs, tmp_path, which=["dense"], params=params, encoder=encoder)["dense"]
    assert isinstance(passages, BestPassageRetriever) and len(passages.view) > len(docs)
    assert passages.search([query], 1).indices[0, 0] == 2
    # Encoded whole, each document is cut at the encoder's 256 tokens: all four vectors are the same opening's.
    scores = whole.search([query], 4).scores[0]
    assert scores.max() - scores.min() < 1e-5
