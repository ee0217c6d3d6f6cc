"""Retrieval quality without an agent: recall@k, hit@k and MRR of each retriever on a question set.

    python -m rollout.retrieval.evaluate retriever=dense dataset.limit=50     (also: rollout eval-retrieval ...)

Prints the table and writes it as retrieval_eval.json and retrieval_eval.csv, beside Hydra's log,
into `output_dir` (default results/retrieval_eval/<dataset>; a sweep puts one subfolder per job there).

Against the questions' gold passages (`metadata.gold_doc_ids`, matched on passage or source
document id) where they carry them; otherwise a hit is a top-k passage containing a gold
answer (normalised), and recall is not defined.

Where qrels are known (TREC qrels files as `qrels.<name>=PATH`, or questions carrying BrowseComp-Plus'
`metadata.evidence_doc_ids`), each retriever's documents are also written as a TREC run file, run.<retriever>.trec
(`trec.depth` documents per query asked, fewer where the retriever matches fewer: the table, the JSON and a warning
say how many it holds; passages ranked up to their documents by their best score), and scored against
each qrels as `trec_eval -c` scores it (`rollout.retrieval.evaluation.trec`): a second table, and a `trec` object
in each retriever's row of retrieval_eval.json. `trec.run_file=true|false` forces it on or off.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from rollout.console import ReadableConsole
from rollout.data import open_corpus
from rollout.data.dataset import DatasetConfig, prepare_data
from rollout.errors import DataError, RolloutError
from rollout.hydra_argv import hydra_command
from rollout.paths import default_cache_dir
from rollout.records import Passage, Question
from rollout.report.browsecomp_leaderboard import doc_ids
from rollout.retrieval import RetrievalParams, Retriever, load_or_build_indexes
from rollout.retrieval.evaluation.document_run import document_run
from rollout.retrieval.evaluation.scores import RetrieverScores, evaluate
from rollout.retrieval.evaluation.trec import (
    BROWSECOMP_PLUS_MEASURES,
    Measure,
    Qrels,
    RunDepth,
    TrecScores,
    binary_qrels,
    read_qrels,
    write_qrels,
    write_run,
)
from rollout.retrieval.evaluation.trec import evaluate as trec_evaluate
from rollout.retrieval.params import SparseParams

logger = logging.getLogger(__name__)

KINDS = ("dense", "sparse", "hybrid")
RESULTS_JSON = "retrieval_eval.json"
RESULTS_CSV = "retrieval_eval.csv"
QRELS_FROM_METADATA = "evidence_doc_ids"
"""The question metadata that turns the TREC block on by itself (`trec.run_file=auto`): BrowseComp-Plus' evidence
documents. `gold_doc_ids` alone does not: many question sets carry it, and their table stays as it was."""


@dataclass(frozen=True, slots=True)
class RetrieverTrec:
    """One retriever's TREC run file and its measures against each qrels."""

    retriever: str
    run_file: Path
    """run.<retriever>.trec in the output folder."""
    depth: int
    """Documents per query asked for (`trec.depth`); `held` says how many the run file holds."""
    tag: str
    """The run file's last column."""
    scores: dict[str, TrecScores]
    """Qrels name (`evidence`, `gold`, ...) -> the run's measures against it."""
    held: RunDepth
    """The documents per query the run file holds: fewer than `depth` where the retriever matched fewer."""

    def to_json(self, qrels_files: dict[str, Path]) -> dict[str, Any]:
        """The `trec` object of the retriever's row in retrieval_eval.json; `leaderboard` names each number as
        BrowseComp-Plus' retrieval leaderboard does ("Evidence Recall@5", "Gold nDCG@10")."""
        return {
            "run_file": self.run_file.name, "depth": self.depth, "held": self.held.to_json(), "tag": self.tag,
            "qrels": {name: {"file": qrels_files[name].name, "queries": s.queries, "missing": s.missing, **s.mean}
                      for name, s in self.scores.items()},
            "leaderboard": {f"{name.title()} {m}": v for name, s in self.scores.items() for m, v in s.mean.items()},
        }


def gather_qrels(questions: Sequence[Question], files: dict[str, str | None]) -> dict[str, Qrels]:
    """Each named qrels, restricted to the questions evaluated: the TREC qrels file given for the name, as it is
    (graded judgments kept), else the questions' `metadata.<name>_doc_ids` judged relevant (1). A name that neither
    gives is left out."""
    ids = [q.id for q in questions]
    out: dict[str, Qrels] = {}
    for name, path in files.items():
        if path:
            judged = read_qrels(path)
            kept = {qid: judged[qid] for qid in ids if qid in judged}
            if not kept:
                raise DataError(f"qrels.{name}={path}: none of its {len(judged)} queries is among the "
                                f"{len(ids)} questions (ids such as {', '.join(ids[:3])}); give the qrels of this "
                                "question set")
            if len(kept) < len(judged):  # e.g. dataset.limit: a leaderboard averages over all of them
                logger.info("qrels.%s: %d of its %d queries are among the questions evaluated; the averages are over "
                            "those", name, len(kept), len(judged))
            out[name] = kept
        elif any(f"{name}_doc_ids" in q.metadata for q in questions):
            out[name] = binary_qrels({q.id: doc_ids(q.metadata, f"{name}_doc_ids") for q in questions})
    return out


def trec_runs(retrievers: dict[str, Retriever], questions: Sequence[Question], passages: Sequence[Passage],
              qrels: dict[str, Qrels], *, depth: int, measures: Sequence[Measure],
              out_dir: Path) -> list[RetrieverTrec]:
    """Each retriever's run file, run.<retriever>.trec in `out_dir`, scored against every qrels."""
    ids, texts = [q.id for q in questions], [q.question for q in questions]
    rows = []
    for name, retriever in retrievers.items():
        run = document_run(retriever, ids, texts, passages, depth)
        tag = f"rollout-{name}"
        path = write_run(out_dir / f"run.{name}.trec", run, tag)
        held = RunDepth.of(run, depth)
        if held.short_queries:
            logger.warning("%s: %d of %d queries hold fewer than the %d documents asked (%.1f on average, at least "
                           "%d): %s", path.name, held.short_queries, held.queries, depth, held.mean, held.least,
                           _why_short(retriever, len(passages), depth))
        rows.append(RetrieverTrec(name, path, depth, tag,
                                  {q: trec_evaluate(run, judged, measures) for q, judged in qrels.items()}, held))
    return rows


def _why_short(retriever: Retriever, passages: int, depth: int) -> str:
    """Why a run holds fewer documents than asked, with the setting that changes it where one does."""
    why = [f"the corpus holds {passages} passages"] if passages < depth else []
    params = getattr(retriever, "params", None)
    if isinstance(params, SparseParams) and params.index_path is None and params.method == "robertson":
        why.append("BM25 returns only documents sharing a word with the query, and its robertson idf gives words in "
                   "over half the passages no weight: retriever.sparse.method=lucene (Lucene's idf) counts them")
    return "; ".join(why) or "the retriever matched no more documents"


def print_trec_table(rows: Sequence[RetrieverTrec], console: Console | None = None) -> None:
    """One line per retriever and qrels: the measures `trec_eval -c` reports for its run file."""
    console = console or ReadableConsole()
    if not rows:
        return
    if rows[0].scores:  # no qrels: only the run files are named
        names = list(next(iter(rows[0].scores.values())).mean)
        table = Table(title=f"TREC run files · asked {rows[0].depth} documents per query · as trec_eval -c",
                      title_justify="left")
        for header in ("retriever", "qrels", "queries", "held", *names):
            table.add_column(header, justify="left" if header in ("retriever", "qrels") else "right")
        for r in rows:
            for qrels_name, s in r.scores.items():
                table.add_row(r.retriever, qrels_name, str(s.queries), r.held.brief(),
                              *[f"{s.mean[m]:.4f}" for m in names])
        console.print(table)
    console.print(f"Run files: {', '.join(f'{r.run_file.name} ({r.held.describe()})' for r in rows)}", markup=False,
                  highlight=False)


def print_table(rows: Sequence[RetrieverScores], console: Console | None = None) -> None:
    console = console or ReadableConsole()
    ks = sorted(rows[0].hit) if rows else []
    table = Table(title=f"retrieval · {rows[0].n if rows else 0} questions · gold = {rows[0].gold if rows else '-'}",
                  title_justify="left")
    table.add_column("retriever")
    for k in ks:
        table.add_column(f"recall@{k}", justify="right")
    for k in ks:
        table.add_column(f"hit@{k}", justify="right")
    table.add_column("MRR", justify="right")
    table.add_column("q/s", justify="right")
    for r in rows:
        table.add_row(r.retriever, *["-" if r.recall[k] is None else f"{r.recall[k]:.3f}" for k in ks],
                      *[f"{r.hit[k]:.3f}" for k in ks], f"{r.mrr:.3f}", f"{r.queries_per_s:.0f}")
    console.print(table)


def write_results(rows: Sequence[RetrieverScores], out_dir: Path, trec: Sequence[RetrieverTrec] = (),
                  qrels_files: dict[str, Path] | None = None) -> list[Path]:
    """The printed table as retrieval_eval.json (typed, one object per retriever) and retrieval_eval.csv; a
    retriever's TREC run and measures, when made, as the `trec` object of its JSON row (the CSV keeps its columns)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trec_of = {t.retriever: t.to_json(qrels_files or {}) for t in trec}
    payload = [{**asdict(r), "recall": {str(k): v for k, v in r.recall.items()},
                "hit": {str(k): v for k, v in r.hit.items()},
                **({"trec": trec_of[r.retriever]} if r.retriever in trec_of else {})} for r in rows]
    (out_dir / RESULTS_JSON).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    ks = sorted(rows[0].hit) if rows else []
    with (out_dir / RESULTS_CSV).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["retriever", "n", "gold", *(f"recall@{k}" for k in ks), *(f"hit@{k}" for k in ks), "mrr",
                         "queries_per_s"])
        for r in rows:
            writer.writerow([r.retriever, r.n, r.gold, *("" if r.recall[k] is None else r.recall[k] for k in ks),
                             *(r.hit[k] for k in ks), r.mrr, r.queries_per_s])
    return [out_dir / RESULTS_JSON, out_dir / RESULTS_CSV]


def run_eval(cfg: DictConfig, out_dir: Path | str | None = None) -> list[RetrieverScores]:
    """Evaluate, print the table, write it into `out_dir` (default: the config's `output_dir`)."""
    c = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    target = out_dir or c.get("output_dir")
    if not target:
        raise RolloutError("output_dir is not set: pass output_dir=DIR (default results/retrieval_eval/<dataset>)")
    out = Path(target)
    cache_dir = Path(c["cache_dir"]) if c.get("cache_dir") else default_cache_dir()
    kind = c["retriever"].get("kind", "all")
    kinds = list(KINDS) if kind == "all" else [kind]
    if any(k not in KINDS for k in kinds):
        raise RolloutError(f"retriever.kind={kind!r}: use retriever=dense, sparse, hybrid or default (all)")
    data = prepare_data(DatasetConfig.from_dict(c["dataset"]), cache_dir)
    passages = open_corpus(data.corpus_path, cache_dir)
    built = load_or_build_indexes(passages, cache_dir, which=kinds, params=RetrievalParams.from_dict(c["retriever"]))
    rows = evaluate({k: built[k] for k in kinds}, data.questions, passages, [int(k) for k in c["ks"]])
    console = ReadableConsole()
    print_table(rows, console)
    trec, qrels_files = _trec_block(c, {k: built[k] for k in kinds}, data.questions, passages, out, console)
    write_results(rows, out, trec, qrels_files)
    console.print(f"Results: {out.resolve()}", markup=False, highlight=False)
    return rows


def _trec_block(c: dict[str, Any], retrievers: dict[str, Retriever], questions: Sequence[Question],
                passages: Sequence[Passage], out: Path,
                console: Console) -> tuple[list[RetrieverTrec], dict[str, Path]]:
    """The run files and their measures when `trec.run_file` asks for them (`auto`: when qrels are known), with the
    qrels they were scored against written beside them (qrels.<name>.txt), so any trec_eval can check the numbers."""
    settings = c.get("trec") or {}
    files = {str(name): (str(path) if path else None) for name, path in (c.get("qrels") or {}).items()}
    wanted = settings.get("run_file", "auto")
    if wanted not in ("auto", True, False):
        raise RolloutError(f"trec.run_file={wanted!r}: use auto (when qrels are known), true or false")
    if wanted is False or (wanted == "auto" and not any(files.values())
                           and not any(QRELS_FROM_METADATA in q.metadata for q in questions)):
        return [], {}
    measures = [Measure.parse(m) for m in settings.get("measures") or BROWSECOMP_PLUS_MEASURES]
    qrels = gather_qrels(questions, files)
    if not qrels:
        logger.warning("No qrels: neither qrels.<name>=PATH nor questions carrying metadata.<name>_doc_ids for %s; "
                       "the run files are written without measures", ", ".join(files) or "any name")
    qrels_files = {name: write_qrels(out / f"qrels.{name}.txt", judged) for name, judged in qrels.items()}
    trec = trec_runs(retrievers, questions, passages, qrels, depth=settings.get("depth", 1000), measures=measures,
                     out_dir=out)
    print_trec_table(trec, console)
    return trec, qrels_files


def _eval_job(cfg: DictConfig) -> None:
    # The job's own folder: `output_dir` for one job, a subfolder of it per job of a sweep.
    run_eval(cfg, HydraConfig.get().runtime.output_dir)


main = hydra_command("retrieval_eval", _eval_job)
"""`python -m rollout.retrieval.evaluate OVERRIDES...` (also `rollout eval-retrieval`); argv goes to Hydra."""


if __name__ == "__main__":
    main()
