"""A Lucene index served for long, and the indexes that must not be served: Java threads stay flat over many gateway
requests; an index whose ids name other passages, or none, is refused at load; a truncated or unreadable index is
named in one line; Lucene's own log lines reach the debug log, not the console.

These need Pyserini as test_lucene.py does (skipped without it, failed with ROLLOUT_REQUIRE_LUCENE=1), except the
checks of text comparison, which are plain Python.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

import rollout.gateway.cli as gateway_module
from rollout.errors import RetrievalError
from rollout.gateway.knowledge import KnowledgeBase
from rollout.paths import PROJECT_ROOT
from rollout.records import Passage
from rollout.retrieval.lucene import LuceneRetriever, corpus_rows_of
from tests.gateway.loopback import SPARSE_MODULE, gateway_file, gateway_served
from tests.retrieval.test_lucene import CORPUS, QUERIES, lucene_index  # noqa: F401 - the fixture, shared

NUMBERED = [Passage(id=str(i), title=p.title, text=p.text) for i, p in enumerate(CORPUS)]
"""The corpus with FlashRAG's ids: rows numbered from 0."""


def _build(root: Path, docs: Sequence[tuple[str, str]], store: str | None) -> Path:
    """A Lucene index of (id, contents) built by Anserini's IndexCollection, storing `store` (-storeRaw,
    -storeContents) or no text at all."""
    (root / "input").mkdir(parents=True)
    with (root / "input" / "docs.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, contents in docs:
            f.write(json.dumps({"id": doc_id, "contents": contents}) + "\n")
    args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(root / "input"), "-index", str(root / "index"), "-threads", "1"]
    indexer = importlib.import_module("jnius").autoclass("io.anserini.index.IndexCollection")
    indexer.main(args + ([store] if store else []))
    return root / "index"


def _jvm_threads() -> int:
    """Live threads of this process' JVM, as its management bean counts them."""
    management = importlib.import_module("jnius").autoclass("java.lang.management.ManagementFactory")
    return int(management.getThreadMXBean().getThreadCount())


def test_java_threads_do_not_grow_with_the_requests_a_gateway_answers(lucene_index: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase(CORPUS, {"sparse": LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS))})

    def send(client: httpx.Client, base: str, n: int) -> None:
        for i in range(n):  # one query, or two (Pyserini's batch search): each request on a thread of its own
            queries = QUERIES[i % 10: i % 10 + 1 + i % 2]
            r = client.post(f"{base}/retrieve/sparse", json={"queries": queries, "topk": 3})
            assert r.status_code == 200 and len(r.json()["result"]) == len(queries)

    with gateway_served(gateway_file(SPARSE_MODULE), kb, tmp_path) as base, httpx.Client(timeout=60) as client:
        send(client, base, 20)  # the worker threads and the gateway's own are up
        before = _jvm_threads()
        send(client, base, 300)
        after = _jvm_threads()
    assert after - before <= 3, f"{after - before} more Java threads after 300 requests"


@pytest.mark.parametrize("store", ["-storeRaw", "-storeContents"])
def test_an_index_whose_ids_are_one_off_from_the_corpus_is_refused(tmp_path: Path, store: str,
                                                                   lucene_index: Path) -> None:
    # DPR numbers passages from 1, FlashRAG's corpus from 0: the index's id 1 is the corpus' passage 0.
    index = _build(tmp_path, [(str(i + 1), p.contents) for i, p in enumerate(NUMBERED)], store)
    with pytest.raises(RetrievalError, match="holds other text than the corpus under the same ids") as caught:
        LuceneRetriever.open(index, corpus_rows_of(NUMBERED), passages=NUMBERED)
    message = str(caught.value)
    assert "\n" not in message and str(index) in message
    first = NUMBERED[0].contents  # the id "1" of the index holds it (the first of the evenly spread sample)
    assert f"id '1' is {first[:59]!r}"[:-1] in message and repr(NUMBERED[1].contents[:40])[:-1] in message
    assert "numbers passages from 1, the corpus from 0" in message and "build_lucene_index" in message


def test_the_gateway_refuses_an_index_of_other_passages_with_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, lucene_index: Path
) -> None:
    async def served(*args: object, **kwargs: object) -> None:  # a gateway that accepted the index stops at once
        print("served")

    monkeypatch.setattr(gateway_module, "serve", served)
    index = _build(tmp_path / "shifted", [(str(i + 1), p.contents) for i, p in enumerate(NUMBERED)], "-storeRaw")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p.to_json()) + "\n" for p in NUMBERED), encoding="utf-8")
    gateway = tmp_path / "gw.json"
    gateway.write_text(json.dumps({"modules": [SPARSE_MODULE]}), encoding="utf-8")
    retriever = tmp_path / "retriever.yaml"
    retriever.write_text(f"sparse:\n  index_path: {index}\n  k1: 0.9\n  b: 0.4\n", encoding="utf-8")
    code = gateway_module.main(["--config", str(gateway), "--port", "0", "--corpus", str(corpus), "--retriever-config",
                         str(retriever), "--cache-dir", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "served" not in out and code == 2 and len(errors) == 1 and "holds other text than the corpus" in errors[0]


@pytest.mark.parametrize("store", ["-storeRaw", None])
def test_an_index_of_another_corpus_is_refused(tmp_path: Path, store: str | None, lucene_index: Path) -> None:
    index = _build(tmp_path, [(f"other-{i}", p.contents) for i, p in enumerate(CORPUS)], store)
    with pytest.raises(RetrievalError, match=r"42 of 42 sampled documents .* have ids the corpus does not hold") as e:
        LuceneRetriever.open(index, corpus_rows_of(CORPUS), passages=CORPUS)
    assert "'other-0' in the index" in str(e.value) and f"{CORPUS[0].id!r} in the corpus" in str(e.value)


def test_an_index_that_stores_no_text_opens_with_one_warning(tmp_path: Path, lucene_index: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    index = _build(tmp_path, [(str(i + 1), p.contents) for i, p in enumerate(NUMBERED)], None)
    with caplog.at_level(logging.WARNING, logger="rollout.retrieval"):
        retriever = LuceneRetriever.open(index, corpus_rows_of(NUMBERED), passages=NUMBERED)
    assert retriever.num_docs == len(NUMBERED)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "stores no document text" in warnings[0] and str(index) in warnings[0]


def test_the_corpus_own_index_opens_without_a_word(lucene_index: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rollout.retrieval"):
        retriever = LuceneRetriever.open(lucene_index, corpus_rows_of(CORPUS), passages=CORPUS)
    assert not caplog.records and retriever.search(QUERIES[:1], 1).indices[0, 0] == len(CORPUS) - 1  # fact-0


def test_a_truncated_index_is_named_in_one_line(lucene_index: Path, tmp_path: Path) -> None:
    index = shutil.copytree(lucene_index, tmp_path / "index")
    segment_info = next(index.glob("*.si"))
    segment_info.write_bytes(segment_info.read_bytes()[:200])
    with pytest.raises(RetrievalError, match="Lucene cannot open the index at") as caught:
        LuceneRetriever.open(index, corpus_rows_of(CORPUS))
    message = str(caught.value)
    assert "\n" not in message and "CorruptIndexException" in message and "copy it again" in message
    assert "JVM exception occurred" not in message


@pytest.mark.parametrize("locked", ["folder", "segments file"])
def test_an_unreadable_index_is_named_unreadable(lucene_index: Path, tmp_path: Path, locked: str) -> None:
    index = shutil.copytree(lucene_index, tmp_path / "index")
    target = index if locked == "folder" else next(index.glob("segments_*"))
    code = ("import sys, numpy as np\nfrom rollout.retrieval.lucene import LuceneRetriever\n"
            "try:\n    LuceneRetriever.open(sys.argv[1], lambda ids: np.zeros(len(ids), np.int64))\n"
            "except Exception as e:\n    print(e)\n")
    command = [sys.executable, "-c", code, str(index)]
    if os.geteuid() == 0:  # root reads whatever the mode says: run without the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop the file-access capabilities")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    target.chmod(0)
    try:
        out = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120).stdout
    finally:
        target.chmod(0o755)
    assert f"the Lucene index at {index} cannot be read (Permission denied" in out, out
    assert "chmod -R a+rX" in out and "no segments_N file" not in out


def test_lucenes_info_lines_go_to_the_debug_log_not_the_console(lucene_index: Path) -> None:
    # Lucene logs them once per JVM, at the first open: a process of its own.
    code = ("import logging, sys, numpy as np\n"
            "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(levelname)s %(message)s')\n"
            "from rollout.retrieval.lucene import LuceneRetriever\n"
            "LuceneRetriever.open(sys.argv[1], lambda ids: np.zeros(len(ids), np.int64)).search(['river'], 1)\n")
    done = subprocess.run([sys.executable, "-c", code, str(lucene_index)], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=300, check=True)
    assert "MemorySegmentIndexInput" not in done.stderr and "INFO:" not in done.stderr, done.stderr
    assert "DEBUG Lucene: Using MemorySegmentIndexInput with Java 21" in done.stdout, done.stdout


def test_one_passage_written_two_ways_is_the_same_text_and_two_passages_are_not() -> None:
    from rollout.retrieval.lucene_ids import same_text, stored_text

    passage = "Aaron\nAaron ( or ; \"Ahärôn\") is a prophet, high priest, and the brother of Moses."
    assert same_text('"Aaron"\n' + passage.split("\n")[1], passage)  # DPR quotes titles
    assert same_text(passage.upper().replace(" ", "  "), passage)
    assert not same_text("Aaron\nHe was the elder brother of Moses and a prophet of God.", passage)
    assert stored_text(json.dumps({"id": "1", "contents": passage}), None) == passage
    assert stored_text(json.dumps({"id": "1", "title": "T", "text": "x y"}), None) == "T\nx y"
    assert stored_text(None, passage) == passage and stored_text(None, None) is None
