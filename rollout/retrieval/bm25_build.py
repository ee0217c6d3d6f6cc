"""bm25s' BM25 index built in bounded memory, its tokenizing spread over every core.

`BM25Retriever.build` holds the whole corpus' tokens as Python lists while bm25s scores them: 12.8 GB for a
million passages. This writes the same files `bm25s.BM25.save` writes, with the same numbers, holding a bounded
share of the corpus at a time:

1. **Tokenize** the corpus in chunks of about `build_memory_mb / (workers + 1) / 16` MB of text (tokens take about
   16 times their text as Python objects). Over a corpus store the chunks go to `workers` processes, each mapping
   the store itself; a chunk comes back as its own vocabulary (first-seen order), each passage's length and each
   passage's distinct terms with their counts (in the order bm25s counts them). The driver merges the
   vocabularies in chunk order, so term ids are the ones a single pass gives; counts document frequencies; and
   spills each chunk's (term, count) pairs to a file in the build directory (`.spill/`, deleted when the build ends;
   a build killed halfway leaves it inside the cache's temporary, which the next start removes with it:
   `rollout.cache_folder`).
2. **Score** each spilled chunk with the final idf (`params.method`'s) and average length, bm25s' `atire` formula in
   float64 term by term as bm25s computes it, and scatter the scores into the memory-mapped `data` / `indices` arrays
   at their column's place (`indptr` is the running sum of the document frequencies; a column's passages ascend, as
   bm25s' own CSC has them).

What stays in memory is the vocabulary (a dict of each distinct token), one integer per passage (its length) and
two arrays per term (document frequency and write cursor): tens of bytes per passage, where the in-memory build
holds kilobytes. The written files are what `Bm25sScorer.load` maps.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import shutil
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

from rollout.records import Passage
from rollout.retrieval.params import SparseParams
from rollout.retrieval.tokenizer import tokenize_batch

logger = logging.getLogger(__name__)

TOKENS_PER_TEXT_BYTE = 16
"""Python bytes a chunk's tokens take per byte of its text (str objects, lists, counters): the chunk size divisor."""
POOL_MIN_PASSAGES = 200_000
"""Below this many passages the tokenizing stays in the building process: starting workers would cost more."""
IDF: dict[str, Callable[[int, int], float]] = {
    "robertson": lambda n, df: math.log(max(1.0, (n - df + 0.5) / (df + 0.5))),
    "lucene": lambda n, df: math.log(1 + (n - df + 0.5) / (df + 0.5)),
}
"""idf(passages, document frequency) per `SparseParams.method`: bm25s' `_score_idf_robertson` and `_score_idf_lucene`
operation for operation, so the floats are the in-memory build's."""


@dataclass(frozen=True, slots=True)
class TokenizedChunk:
    """One chunk's tokens as the driver merges them."""

    vocab: list[str]
    """The chunk's distinct tokens, in the order first seen."""
    lengths: np.ndarray
    """int32, per passage: its number of tokens."""
    distinct: np.ndarray
    """int32, per passage: its number of distinct tokens."""
    terms: np.ndarray
    """int32: each passage's distinct tokens (ids into `vocab`), passage after passage, in first-seen order."""
    counts: np.ndarray
    """int32: how often each of `terms` occurs in its passage."""


def tokenize_chunk(texts: Sequence[str], stopwords: bool, stemming: bool) -> TokenizedChunk:
    """The tokens of `texts` (title, newline, text) counted per passage, ids local to the chunk."""
    local: dict[str, int] = {}
    lengths, distinct, terms, counts = array("i"), array("i"), array("i"), array("i")
    for tokens in tokenize_batch(texts, stopwords=stopwords, stemming=stemming):
        # Counter keeps first-seen order: the order bm25s counts a passage's tokens in.
        counted = Counter([local.setdefault(token, len(local)) for token in tokens])
        lengths.append(len(tokens))
        distinct.append(len(counted))
        terms.extend(counted.keys())
        counts.extend(counted.values())
    return TokenizedChunk(list(local), *(np.frombuffer(a, dtype=np.int32) for a in (lengths, distinct, terms, counts)))


def tokenize_store_rows(store_path: str, start: int, stop: int, stopwords: bool, stemming: bool) -> TokenizedChunk:
    """In a worker process: the chunk of rows start..stop-1 of the corpus store at `store_path`."""
    from rollout.data.corpus_store import CorpusStore

    return tokenize_chunk(CorpusStore(Path(store_path)).contents(start, stop), stopwords, stemming)


def chunk_bounds(passages: Sequence[Passage], text_bytes: int) -> list[tuple[int, int]]:
    """Row ranges of about `text_bytes` of text each, from the corpus' mean passage size (a store knows its size
    without reading the passages; a list is measured)."""
    n = len(passages)
    size = getattr(passages, "text_bytes", None)
    mean = (size() if callable(size) else sum(len(p.title) + len(p.text) + 1 for p in passages)) / max(n, 1)
    rows = max(1, int(text_bytes // max(mean, 1.0)))
    return [(start, min(start + rows, n)) for start in range(0, n, rows)]


ChunkTokenizer = Callable[[Sequence[Passage], list[tuple[int, int]], SparseParams], Iterator[TokenizedChunk]]
"""Tokenizes the given row ranges of a corpus and yields them in order: on this machine's cores
(`local_tokenizer`), or as Ray tasks on a cluster (`rollout.retrieval.ray_build`)."""


def local_tokenizer(workers: int) -> ChunkTokenizer:
    """Chunks tokenized in this process, or over a corpus store on `workers` spawned processes, a few ahead."""

    def tokenize(passages: Sequence[Passage], bounds: list[tuple[int, int]],
                 params: SparseParams) -> Iterator[TokenizedChunk]:
        store_path = getattr(passages, "path", None)
        if workers <= 1 or store_path is None or len(passages) < POOL_MIN_PASSAGES:
            for start, stop in bounds:
                texts = (passages.contents(start, stop) if hasattr(passages, "contents")
                         else [p.contents for p in passages[start:stop]])
                yield tokenize_chunk(texts, params.stopwords, params.stemming)
            return
        # spawn: the building process may hold threads (a gateway's, numba's) that a fork would copy mid-lock.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = []
            for start, stop in bounds:
                pending.append(pool.submit(tokenize_store_rows, str(store_path), start, stop, params.stopwords,
                                           params.stemming))
                if len(pending) > workers:  # the workers stay busy; finished chunks wait for the driver, not pile up
                    yield pending.pop(0).result()
            for future in pending:
                yield future.result()

    return tokenize


def build_bm25s_files(passages: Sequence[Passage], params: SparseParams, out: Path, *,
                      workers: int | None = None,
                      tokenizer: ChunkTokenizer | None = None) -> int:
    """Write bm25s' index files for `passages` into directory `out`; the number of distinct tokens. The chunks are
    tokenized by `tokenizer`, by default on `workers` processes (every core).

    The same files, term ids and scores as `bm25s.BM25(method="atire", idf_method=params.method, dtype="float64")`
    indexing the whole corpus at once, as `Bm25sScorer.build` does."""
    started = time.perf_counter()
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    out.mkdir(parents=True, exist_ok=True)
    spill = out / ".spill"
    spill.mkdir()
    try:
        vocab: dict[str, int] = {}
        df = np.zeros(0, dtype=np.int64)
        lengths: list[np.ndarray] = []
        bounds = chunk_bounds(passages, params.build_memory_mb * 1024 * 1024 // (workers + 1) // TOKENS_PER_TEXT_BYTE)
        for i, chunk in enumerate((tokenizer or local_tokenizer(workers))(passages, bounds, params)):
            to_global = np.fromiter((vocab.setdefault(t, len(vocab)) for t in chunk.vocab), dtype=np.int32,
                                    count=len(chunk.vocab))
            terms = to_global[chunk.terms]
            if len(vocab) > len(df):
                df = np.concatenate([df, np.zeros(len(vocab) - len(df), dtype=np.int64)])
            df += np.bincount(terms, minlength=len(vocab))
            np.save(spill / f"{i}-terms.npy", terms)
            np.save(spill / f"{i}-counts.npy", chunk.counts)
            np.save(spill / f"{i}-distinct.npy", chunk.distinct)
            lengths.append(chunk.lengths)
        n_chunks = len(lengths)
        doc_len = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
        del lengths
        tokenized = time.perf_counter()
        _write_scores(spill, n_chunks, doc_len, df, params, out)
        _write_vocab_and_params(out, vocab, params, len(doc_len))
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    # Where a large build's minutes went is worth the console; a small one's is routine.
    logger.log(logging.INFO if len(doc_len) >= POOL_MIN_PASSAGES else logging.DEBUG,
               "BM25 over %d passages: %d tokens, tokenized in %.1f s, scored in %.1f s (%d worker(s))",
               len(doc_len), len(vocab), tokenized - started, time.perf_counter() - tokenized, workers)
    return len(vocab)


def _write_scores(spill: Path, n_chunks: int, doc_len: np.ndarray, df: np.ndarray, params: SparseParams,
                  out: Path) -> None:
    n_docs = len(doc_len)
    # bm25s: the mean of the lengths as numpy takes it, and math.log per term (numpy's log may round otherwise).
    avg = np.array(doc_len, dtype=np.int64).mean() if n_docs else np.float64(0.0)
    idf = np.array([IDF[params.method](n_docs, d) if d else 0.0 for d in df.tolist()], dtype=np.float64)
    indptr = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    nnz = int(indptr[-1])
    data = np.lib.format.open_memmap(out / "data.csc.index.npy", "w+", np.float64, (nnz,))
    indices = np.lib.format.open_memmap(out / "indices.csc.index.npy", "w+", np.int32, (nnz,))
    cursor = indptr[:-1].copy()
    k1, b = params.k1, params.b
    first_doc = 0
    for i in range(n_chunks):
        terms = np.load(spill / f"{i}-terms.npy")
        tf = np.load(spill / f"{i}-counts.npy").astype(np.float64)
        distinct = np.load(spill / f"{i}-distinct.npy")
        docs = np.repeat(np.arange(first_doc, first_doc + len(distinct), dtype=np.int32), distinct)
        first_doc += len(distinct)
        if len(terms) == 0:  # a chunk of passages that tokenized to nothing
            continue
        l_d = doc_len[docs].astype(np.float64)
        # bm25s' _score_tfc_atire with its operations in its order, then idf * tfc.
        scores = idf[terms] * ((tf * (k1 + 1)) / (tf + k1 * (1 - b + b * l_d / avg)))
        order = np.argsort(terms, kind="stable")  # by term; a term's passages stay ascending
        sorted_terms = terms[order]
        starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
        group_sizes = np.diff(np.r_[starts, len(sorted_terms)])
        rank = np.arange(len(sorted_terms)) - np.repeat(starts, group_sizes)
        positions = cursor[sorted_terms] + rank
        data[positions] = scores[order]
        indices[positions] = docs[order]
        cursor[sorted_terms[starts]] += group_sizes
    data.flush()
    indices.flush()
    del data, indices
    np.save(out / "indptr.csc.index.npy", indptr, allow_pickle=False)


def _write_vocab_and_params(out: Path, vocab: dict[str, int], params: SparseParams, n_docs: int) -> None:
    """`vocab.index.json` and `params.index.json` as `bm25s.BM25.save` writes them."""
    (out / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    bm25s_params = {"k1": params.k1, "b": params.b, "delta": 0.5, "method": "atire", "idf_method": params.method,
                    "dtype": "float64", "int_dtype": "int32", "num_docs": n_docs, "version": bm25s.__version__,
                    "backend": "numpy"}
    (out / "params.index.json").write_text(json.dumps(bm25s_params, indent=4), encoding="utf-8")
