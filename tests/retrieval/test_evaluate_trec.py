"""`rollout eval-retrieval`'s TREC block on a BrowseComp-Plus-shaped fixture: long documents cut into passages, queries
carrying evidence and gold docids; run files ranked by document and numbers equal to trec_eval's on those files."""

from __future__ import annotations

import json
import random

import ir_measures
import pytest
import pytrec_eval
from hydra import compose, initialize_config_dir

from rollout.errors import RolloutError
from rollout.paths import CONF_DIR
from rollout.retrieval.evaluate import run_eval
from rollout.retrieval.evaluation.trec import BROWSECOMP_PLUS_MEASURES, Measure, read_qrels, read_run

FILLER = ("the of a report page site archive note list record season family local history article source index "
          "review club city team early later small large public private annual").split()
TOPICS = ["glacier", "violin", "comet", "harbor", "orchard", "quartz", "saddle", "temple", "tundra", "velvet",
          "willow", "zebra"]


def write_fixture(folder, *, evidence: bool = True) -> tuple[str, str]:
    """A corpus of long documents (BrowseComp-Plus' `docid`, `text`, `url`) and questions whose metadata names
    their evidence and gold documents, as `dataset=browsecomp_plus` gives them."""
    rng = random.Random(0)
    docs = []
    for i, topic in enumerate(TOPICS):
        words = [rng.choice(FILLER) for _ in range(300)]
        for at in rng.sample(range(300), 4):  # the topic inside the document, not only in its first passage
            words[at] = topic
        docs.append({"docid": str(1000 + i), "text": " ".join(words), "url": f"https://example.org/{i}"})
    questions = []
    for q in range(8):
        evidence_docs = [str(1000 + q), str(1000 + q + 1)]
        metadata = {"gold_doc_ids": evidence_docs[:1]}
        if evidence:
            metadata["evidence_doc_ids"] = evidence_docs
        questions.append({"query_id": str(700 + q), "query": f"which {TOPICS[q]} and {TOPICS[q + 1]} record",
                          "answer": "x", "metadata": metadata})
    corpus, qa = folder / "corpus.jsonl", folder / "queries.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    qa.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return str(corpus), str(qa)


def overrides(corpus: str, qa: str, cache_dir, out, *extra: str) -> list[str]:
    return ["dataset=files", f"dataset.corpus.path={corpus}", f"dataset.questions.path={qa}",
            "dataset.corpus.columns={id: docid, text: text}", "dataset.corpus.chunk_tokens=60",
            "dataset.corpus.chunk_overlap=10",
            "dataset.questions.columns={id: query_id, question: query, golden_answers: answer, metadata: metadata}",
            "retriever=sparse", f"cache_dir={cache_dir}", f"output_dir={out}", *extra]


def run(args: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return run_eval(compose("retrieval_eval", overrides=args))


def test_run_files_rank_documents_and_score_as_trec_eval_on_them(tmp_path, cache_dir, capsys):
    corpus, qa = write_fixture(tmp_path)
    out = tmp_path / "out"
    rows = run(overrides(corpus, qa, cache_dir, out, "trec.depth=5"))
    assert [r.retriever for r in rows] == ["sparse"] and rows[0].recall  # the usual table is there as before

    ranked = read_run(out / "run.sparse.trec")
    assert set(ranked) == {str(700 + q) for q in range(8)}
    assert all(0 < len(docs) <= 5 and all("#" not in d for d in docs) for docs in ranked.values())  # documents
    assert read_qrels(out / "qrels.evidence.txt")["700"] == {"1000": 1, "1001": 1}
    assert read_qrels(out / "qrels.gold.txt")["700"] == {"1000": 1}

    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]
    assert saved["run_file"] == "run.sparse.trec" and saved["depth"] == 5
    trec_eval = {"recall.5,100,1000", "ndcg_cut.10"}  # BrowseComp-Plus': -m recall.5,100,1000 -m ndcg_cut.10
    for name in ("evidence", "gold"):
        qrels = read_qrels(out / saved["qrels"][name]["file"])
        per_query = pytrec_eval.RelevanceEvaluator(qrels, trec_eval).evaluate(ranked)
        for m in BROWSECOMP_PLUS_MEASURES:
            theirs = sum(v[Measure.parse(m).trec_eval_name] for v in per_query.values()) / len(qrels)
            assert saved["qrels"][name][m] == pytest.approx(theirs, abs=1e-12)
            assert saved["leaderboard"][f"{name.title()} {m}"] == saved["qrels"][name][m]
    assert saved["qrels"]["evidence"]["Recall@100"] > 0.5  # BM25 finds the topics' documents

    printed = capsys.readouterr().out
    assert "as trec_eval -c" in printed and "Run files: run.sparse.trec" in printed
    line = next(x for x in printed.splitlines() if "│ sparse" in x and "│ gold" in x)
    assert f"{saved['qrels']['gold']['nDCG@10']:.4f}" in line


def test_qrels_files_are_read_as_given_for_the_questions_evaluated(tmp_path, cache_dir):
    corpus, qa = write_fixture(tmp_path, evidence=False)
    graded = tmp_path / "qrel_graded.txt"
    graded.write_text("700 0 1000 2\n700 0 1005 0\n701 0 1002 1\n999 0 1003 1\n")
    out = tmp_path / "out"
    run(overrides(corpus, qa, cache_dir, out, f"qrels.evidence={graded}", "dataset.limit=1"))
    assert read_qrels(out / "qrels.evidence.txt") == {"700": {"1000": 2, "1005": 0}}  # limited to question 700
    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]["qrels"]
    assert set(saved) == {"evidence", "gold"} and saved["evidence"]["queries"] == 1
    qrels = ir_measures.read_trec_qrels(str(out / "qrels.evidence.txt"))
    ranked = ir_measures.read_trec_run(str(out / "run.sparse.trec"))
    theirs = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, ranked)
    assert saved["evidence"]["nDCG@10"] == pytest.approx(theirs[ir_measures.nDCG @ 10], abs=1e-12)


def test_question_sets_without_evidence_ids_keep_their_table_alone(tmp_path, cache_dir):
    corpus, qa = write_fixture(tmp_path, evidence=False)
    out = tmp_path / "out"
    run(overrides(corpus, qa, cache_dir, out))
    assert not list(out.glob("*.trec")) and not list(out.glob("qrels.*"))
    assert "trec" not in json.loads((out / "retrieval_eval.json").read_text())[0]
    run(overrides(corpus, qa, cache_dir, out, "trec.run_file=true", "trec.measures=[nDCG@3]"))
    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]
    assert list(saved["qrels"]) == ["gold"] and list(saved["leaderboard"]) == ["Gold nDCG@3"]


@pytest.mark.parametrize(("setting", "error"), [
    ("trec.run_file=maybe", "trec.run_file='maybe': use auto"),
    ("trec.measures=[MAP]", "unknown measure 'MAP'"),
])
def test_bad_trec_settings_name_the_fix(tmp_path, cache_dir, setting, error):
    corpus, qa = write_fixture(tmp_path)
    with pytest.raises(RolloutError, match=error):
        run(overrides(corpus, qa, cache_dir, tmp_path / "out", setting))


def test_qrels_of_another_question_set_are_refused(tmp_path, cache_dir):
    corpus, qa = write_fixture(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("1 0 1000 1\n")
    with pytest.raises(RolloutError, match=r"qrels.evidence=.*none of its 1 queries is among the 8 questions"):
        run(overrides(corpus, qa, cache_dir, tmp_path / "out", f"qrels.evidence={other}"))


def test_browsecomp_plus_as_shipped_scores_as_its_trec_eval_command(tmp_path, cache_dir):
    # Its exact formats: corpus rows {docid, text, url}, decrypted queries {query_id, query, answer, ...}, and the
    # two qrels files `query_id Q0 docid 1`, read by `dataset=browsecomp_plus` into the questions' metadata.
    corpus, _ = write_fixture(tmp_path)
    queries = tmp_path / "browsecomp_plus_decrypted.jsonl"
    queries.write_text("".join(json.dumps({"query_id": str(700 + q), "query": f"which {TOPICS[q]} and {TOPICS[q + 1]}",
                                           "answer": "x", "evidence_docs": [], "gold_docs": [], "negative_docs": []})
                               + "\n" for q in range(8)))
    evidence, gold = tmp_path / "qrel_evidence.txt", tmp_path / "qrel_golds.txt"
    evidence.write_text("".join(f"{700 + q} Q0 {1000 + q} 1\n{700 + q} Q0 {1000 + q + 1} 1\n" for q in range(8)))
    gold.write_text("".join(f"{700 + q} Q0 {1000 + q + 1} 1\n" for q in range(8)))
    out = tmp_path / "out"
    run(["dataset=browsecomp_plus", f"dataset.corpus.path={corpus}", f"dataset.questions.path={queries}",
         f"dataset.qrels.evidence={evidence}", f"dataset.qrels.gold={gold}", "retriever=sparse",
         f"cache_dir={cache_dir}", f"output_dir={out}"])
    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]
    ranked = read_run(out / "run.sparse.trec")
    assert saved["depth"] == 1000 and len(ranked) == 8
    for name, shipped in (("evidence", evidence), ("gold", gold)):
        qrels = read_qrels(shipped)  # the files as BrowseComp-Plus ships them, not the copies rollout wrote
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"recall.5,100,1000", "ndcg_cut.10"}).evaluate(ranked)
        for m in BROWSECOMP_PLUS_MEASURES:
            theirs = sum(v[Measure.parse(m).trec_eval_name] for v in per_query.values()) / len(qrels)
            assert saved["leaderboard"][f"{name.title()} {m}"] == pytest.approx(theirs, abs=1e-12)


def test_run_files_state_the_depth_they_hold_not_only_the_depth_asked(tmp_path, cache_dir, capsys, caplog):
    # BM25 matches a query's documents by their topic words alone: "which", "and", "record" are stopwords or in more
    # than half the passages (idf 0), so each query holds a few of the 12 documents, far from the 1,000 asked.
    corpus, qa = write_fixture(tmp_path)
    out = tmp_path / "out"
    with caplog.at_level("WARNING", logger="rollout.retrieval.evaluate"):
        run(overrides(corpus, qa, cache_dir, out))
    held = [len(docs) for docs in read_run(out / "run.sparse.trec").values()]
    assert max(held) < 1000
    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]
    assert saved["depth"] == 1000
    assert saved["held"] == {"mean": pytest.approx(sum(held) / len(held)), "least": min(held), "most": max(held),
                             "short_queries": len(held)}

    printed = " ".join(capsys.readouterr().out.split())  # rich may wrap the title
    assert "asked 1000 documents per query" in printed
    assert "1000 documents per query ·" not in printed.replace("asked 1000", "")  # no bare claim of 1000 held
    statement = f"asked 1000 documents per query, held {sum(held) / len(held):.1f} on average, at least {min(held)}"
    assert f"run.sparse.trec ({statement})" in printed
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"run.sparse.trec: {len(held)} of {len(held)} queries hold fewer than the 1000 documents asked" in warning
    assert "retriever.sparse.method=lucene" in warning  # the idf that gives common words a weight


def test_a_run_that_holds_its_depth_says_so_without_a_warning(tmp_path, cache_dir, capsys, caplog):
    corpus, qa = write_fixture(tmp_path)
    out = tmp_path / "out"
    with caplog.at_level("WARNING", logger="rollout.retrieval.evaluate"):
        run(overrides(corpus, qa, cache_dir, out, "trec.depth=1"))
    assert json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]["held"] == {
        "mean": 1.0, "least": 1, "most": 1, "short_queries": 0}
    assert "run.sparse.trec (asked 1 documents per query, held 1)" in " ".join(capsys.readouterr().out.split())
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_with_lucenes_idf_a_run_holds_every_document_sharing_a_word(tmp_path, cache_dir):
    # The same queries with Lucene's idf: "record" is in most passages and now counts, so every document that holds
    # it enters the run, up to all 12.
    corpus, qa = write_fixture(tmp_path)
    out = tmp_path / "out"
    run(overrides(corpus, qa, cache_dir, out, "retriever.sparse.method=lucene"))
    held = [len(docs) for docs in read_run(out / "run.sparse.trec").values()]
    texts = [json.loads(line)["text"].split() for line in open(corpus)]
    assert held == [sum(1 for words in texts if {"record", TOPICS[q], TOPICS[q + 1]} & set(words)) for q in range(8)]
    assert min(held) > 2 and max(held) == 12
    saved = json.loads((out / "retrieval_eval.json").read_text())[0]["trec"]
    assert saved["held"]["least"] == min(held)
