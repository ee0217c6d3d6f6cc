"""BrowseComp-Plus' data as its authors ship it: the corpus, the decrypted queries and the two qrels files.

- The corpus (`Tevatron/browsecomp-plus-corpus`, ~100K web documents): rows `docid`, `text`, `url`, as a jsonl or
  parquet file or the Hugging Face dataset read from the local cache (`read_offline`: never the network at run
  time). Each document is one corpus row, kept whole: `get_document` returns its text as it is, BM25 indexes it whole
  as BrowseComp-Plus' Pyserini index does, and a dense index that wants passages cuts them as views of it
  (`rollout.retrieval.doc_passages`). The `url` column is not read: no tool returns it.
- The queries (`browsecomp_plus_decrypted.jsonl`, written by its `scripts_build_index/decrypt_dataset.py`): fields
  `query_id`, `query`, `answer` (and `evidence_docs`, `gold_docs`, `negative_docs`, whole documents, not read: the
  qrels say which documents they are).
- The qrels (`topics-qrels/qrel_evidence.txt`, `qrel_golds.txt`): TREC lines `qid iteration docid relevance`. A
  question's metadata gets `evidence_doc_ids` (documents needed to answer it) and `gold_doc_ids` (those that also
  hold the answer), each in file order; relevance 0 is "judged, not relevant" and left out, as trec_eval reads it.

A qrels file that is missing, unreadable or has a line that is not four fields ending in an integer is a `DataError`
naming it: recall computed against half a judgment file would look like a weak retriever. A judged docid the corpus
does not hold is a counted warning, not an error: a sample of the corpus is a fair thing to run on, and the warning
says that recall is then bounded below 1.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rollout.data.specs import CorpusSpec
from rollout.errors import DataError
from rollout.records import Question

logger = logging.getLogger(__name__)

CORPUS_HF_NAME = "Tevatron/browsecomp-plus-corpus"
"""The corpus on the Hugging Face Hub."""
CORPUS_DOWNLOAD = ("python -c \"from datasets import load_dataset; "
                   f"load_dataset('{CORPUS_HF_NAME}', split='train')\"")
"""The command that puts the corpus into the local Hugging Face cache (where the network is reachable), as
BrowseComp-Plus' README gives it."""
EVIDENCE, GOLD = "evidence_doc_ids", "gold_doc_ids"
"""The question metadata keys the two qrels fill."""
QRELS_FORMAT = "TREC qrels lines 'query_id iteration docid relevance', e.g. '769 Q0 18639 1'"
_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class QrelsSpec:
    """Where the two judgment files are (`dataset.qrels`)."""

    evidence: str | None = None
    """`topics-qrels/qrel_evidence.txt`: the documents needed to answer each query."""
    gold: str | None = None
    """`topics-qrels/qrel_golds.txt`: the evidence documents that also hold the answer."""

    def paths(self) -> dict[str, Path]:
        """Setting name → path of each file; a `DataError` names an unset one."""
        out = {}
        for name in ("evidence", "gold"):
            value = getattr(self, name)
            if not value:
                raise DataError(f"dataset.qrels.{name} is not set: point it at BrowseComp-Plus' "
                                f"topics-qrels/{'qrel_evidence.txt' if name == 'evidence' else 'qrel_golds.txt'}")
            out[name] = Path(str(value)).expanduser()
        return out


@dataclass(frozen=True, slots=True)
class Qrels:
    """The judged documents of each query, by file: qid → docids in file order (relevant ones only)."""

    evidence: Mapping[str, list[str]] = field(default_factory=dict)
    gold: Mapping[str, list[str]] = field(default_factory=dict)

    def annotate(self, question: Question) -> Question:
        """`question` with `evidence_doc_ids` and `gold_doc_ids` in its metadata (empty lists when unjudged)."""
        metadata = {**question.metadata, EVIDENCE: list(self.evidence.get(question.id, [])),
                    GOLD: list(self.gold.get(question.id, []))}
        return replace(question, metadata=metadata)

    def docids(self) -> set[str]:
        """Every docid either file judges relevant."""
        return {d for judged in (self.evidence, self.gold) for docs in judged.values() for d in docs}


def read_qrels(path: Path, setting: str) -> dict[str, list[str]]:
    """qid → relevant docids (relevance > 0), in file order without repeats; a `DataError` names the file (and the
    line) when it cannot be used, and `setting` (e.g. `dataset.qrels.gold`) as what to fix."""
    if not path.is_file():
        raise DataError(f"{setting}={path}: no such file; point it at BrowseComp-Plus' topics-qrels file "
                        f"({QRELS_FORMAT})")
    judged: dict[str, dict[str, None]] = {}
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 4 or not _is_int(fields[3]):
                    raise DataError(f"{path}:{lineno}: {line.strip()!r} is not a qrels line; {setting} must hold "
                                    f"{QRELS_FORMAT}")
                qid, _, docid, relevance = fields
                docs = judged.setdefault(qid, {})
                if int(relevance) > 0:
                    docs[docid] = None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{setting}={path}: cannot be read ({e}); it must be a UTF-8 text file of "
                        f"{QRELS_FORMAT}") from e
    if not judged:
        raise DataError(f"{setting}={path} is empty; it must hold {QRELS_FORMAT}")
    return {qid: list(docs) for qid, docs in judged.items()}


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def read_qrels_spec(spec: QrelsSpec) -> Qrels:
    """Both judgment files of `spec`, read and checked."""
    paths = spec.paths()
    return Qrels(read_qrels(paths["evidence"], "dataset.qrels.evidence"),
                 read_qrels(paths["gold"], "dataset.qrels.gold"))


def warn_unknown_docids(qrels: Qrels, in_corpus: Callable[[list[str]], list[bool]], corpus: str) -> int:
    """Log one warning counting the judged docids the corpus does not hold (with a few of them); the count.

    `in_corpus` answers, for a list of docids, whether the corpus holds each (one lookup of all of them)."""
    docids = sorted(qrels.docids())
    missing = [d for d, held in zip(docids, in_corpus(docids), strict=True) if not held]
    if missing:
        absent = set(missing)
        queries = {qid for judged in (qrels.evidence, qrels.gold) for qid, docs in judged.items()
                   if not absent.isdisjoint(docs)}
        logger.warning("%d of the %d documents the qrels judge relevant (for %d quer%s) are not in the corpus %s, "
                       "e.g. %s: no search can return them, so evidence and gold recall stay below 1 for those "
                       "queries. Point dataset.corpus at the whole %s to judge against all of them",
                       len(missing), len(docids), len(queries), "y" if len(queries) == 1 else "ies", corpus,
                       ", ".join(missing[:_EXAMPLES]), CORPUS_HF_NAME)
    return len(missing)


def check_corpus_spec(spec: CorpusSpec) -> None:
    """A `DataError` for a corpus setting that would cut BrowseComp-Plus' documents in the corpus file: the store
    must keep each document whole (see the module docstring)."""
    if spec.chunk_tokens is not None:
        raise DataError(f"dataset.corpus.chunk_tokens={spec.chunk_tokens} would cut each BrowseComp-Plus document "
                        "into passages in the corpus itself, and get_document and BM25 read whole documents; set "
                        "dataset.corpus.chunk_tokens=null, and retriever.dense.passage_tokens=<N> for a dense index "
                        "over passages of N words")


@contextlib.contextmanager
def offline_hub() -> Iterator[None]:
    """Hugging Face's libraries in offline mode for the block: a dataset is read from the local cache, never
    downloaded (without it `datasets` retries the Hub for half a minute before it says the cache lacks it)."""
    import datasets.config
    import huggingface_hub.constants

    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = before


def read_offline(read: Callable[[], Any], spec: CorpusSpec) -> Any:
    """`read()` (which loads the corpus `spec` names) with the Hub offline when the corpus is a Hugging Face
    dataset; a `DataError` from a dataset missing from the cache names the command that downloads it."""
    if not spec.hf_name:
        return read()
    try:
        with offline_hub():
            return read()
    except DataError as e:
        # `datasets` reports a dataset it cannot find offline as an OSError (ConnectionError, FileNotFoundError);
        # a malformed row of a dataset it did find is another DataError, passed on as it is.
        if not isinstance(e.__cause__, OSError):
            raise
        download = (CORPUS_DOWNLOAD if spec.hf_name == CORPUS_HF_NAME else
                    f"python -c \"from datasets import load_dataset; load_dataset('{spec.hf_name}'"
                    f"{', ' + repr(spec.hf_config) if spec.hf_config else ''}, split='{spec.split}')\"")
        raise DataError(f"the corpus {spec.source} is not in the local Hugging Face cache, and a run never downloads "
                        f"it: run once where the network is reachable `{download}` (HF_HOME chooses the cache), or "
                        f"point dataset.corpus.path at a jsonl or parquet file of it ({type(e.__cause__).__name__}: "
                        f"{str(e.__cause__).splitlines()[0] if str(e.__cause__) else ''})") from e

