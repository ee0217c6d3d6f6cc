"""The generated demo knowledge base: determinism, size, and questions its corpus can answer."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest

from rollout.data import DemoKB, ensure_demo_kb, generate_demo_kb, load_corpus, load_questions
from rollout.data.demo_world import build_world


@pytest.fixture(scope="module")
def kb():
    return generate_demo_kb(n_passages=2000, n_questions=200, seed=0)


def test_same_seed_same_kb_other_seed_other_kb(kb):
    passages, questions = kb
    again = generate_demo_kb(n_passages=2000, n_questions=200, seed=0)
    assert [p.to_json() for p in again[0]] == [p.to_json() for p in passages]
    assert [q.to_json() for q in again[1]] == [q.to_json() for q in questions]
    other = generate_demo_kb(n_passages=2000, n_questions=200, seed=1)
    assert [p.to_json() for p in other[0]] != [p.to_json() for p in passages]


def test_generation_does_not_touch_the_global_rng():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    generate_demo_kb(n_passages=300, n_questions=20, seed=5)
    assert random.random() == expected


def test_sizes_and_unique_ids(kb):
    passages, questions = kb
    assert len(passages) == 2000 and len(questions) == 200
    assert len({p.id for p in passages}) == 2000
    assert len({q.id for q in questions}) == 200
    assert all(re.fullmatch(r"doc-\d{6}", p.id) for p in passages)
    assert len({q.question for q in questions}) == 200


def test_scales_to_twenty_thousand_passages():
    passages, questions = generate_demo_kb(n_passages=20_000, n_questions=500, seed=2)
    assert len(passages) == 20_000 and len({p.id for p in passages}) == 20_000
    assert len(questions) == 500


def test_gold_passages_exist_and_contain_the_answer(kb):
    passages, questions = kb
    by_id = {p.id: p for p in passages}
    for q in questions:
        assert q.gold_doc_ids, q
        assert len(q.gold_doc_ids) == q.metadata["hops"]
        gold = [by_id[d].contents for d in q.gold_doc_ids]  # KeyError: a gold id not in the corpus
        assert any(q.golden_answers[0] in text for text in gold), q
        assert all(isinstance(a, str) and a for a in q.golden_answers)


def test_style_and_hops_mix(kb):
    _, questions = kb
    mix = Counter((q.metadata["hops"], q.metadata["style"]) for q in questions)
    for hops in (1, 2):
        for style in ("exact", "paraphrase", "identifier"):
            assert mix[(hops, style)] >= 15, mix


def test_identifier_questions_name_the_entity_only_by_a_code_found_in_a_gold_passage(kb):
    passages, questions = kb
    by_id = {p.id: p for p in passages}
    for q in (q for q in questions if q.metadata["style"] == "identifier"):
        codes = re.findall(r"\b[A-Z]+-\d+\b", q.question)
        assert len(codes) == 1, q.question
        first_gold = by_id[q.gold_doc_ids[0]]
        assert codes[0] in first_gold.text
        assert first_gold.title not in q.question  # the entity's name is never given


def test_paraphrase_questions_avoid_the_passage_wording(kb):
    passages, questions = kb
    by_id = {p.id: p for p in passages}
    exact_overlap, paraphrase_overlap = [], []
    for q in (q for q in questions if q.metadata["hops"] == 1 and q.metadata["style"] != "identifier"):
        passage = by_id[q.gold_doc_ids[0]]
        words = set(re.findall(r"[a-z]+", q.question.replace(passage.title, "")))
        shared = words & set(re.findall(r"[a-z]+", passage.text)) - {"in", "the", "of", "is", "was", "a"}
        (exact_overlap if q.metadata["style"] == "exact" else paraphrase_overlap).append(len(shared))
    assert sum(exact_overlap) / len(exact_overlap) > sum(paraphrase_overlap) / len(paraphrase_overlap) + 0.5


def test_two_hop_answers_are_not_in_the_question(kb):
    _, questions = kb
    assert all(q.golden_answers[0] not in q.question for q in questions)


def test_entity_names_never_collide_across_kinds():
    world, _ = build_world(random.Random(0), 3000)
    words = [n for n in world.cities] + [n for n in world.countries]
    words += [n.split(" ")[0] for n in world.orgs]
    assert len(words) == len(set(words))
    firsts_and_surnames = {w for n in world.persons for w in n.split(" ")}
    assert not firsts_and_surnames & set(words)
    assert len(world.persons) == len(set(world.persons))


def test_too_small_a_corpus_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="at least"):
        generate_demo_kb(n_passages=10, n_questions=5)
    with pytest.raises(ValueError, match="raise n_passages or lower n_questions"):
        generate_demo_kb(n_passages=60, n_questions=5000)


def test_ensure_writes_once_and_loads_back(tmp_path: Path):
    kb = ensure_demo_kb(tmp_path, n_passages=300, n_questions=30, seed=4)
    assert isinstance(kb, DemoKB)
    assert kb.corpus_path.parent == tmp_path / "demo-300-30-4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-300-30-4"]  # no scratch left behind
    before = kb.corpus_path.stat().st_mtime_ns
    assert ensure_demo_kb(tmp_path, n_passages=300, n_questions=30, seed=4) == kb
    assert kb.corpus_path.stat().st_mtime_ns == before

    passages, questions = generate_demo_kb(n_passages=300, n_questions=30, seed=4)
    assert load_corpus(kb.corpus_path) == passages
    assert load_questions(kb.questions_path) == questions


def test_ensure_is_byte_identical_across_cache_dirs(tmp_path: Path):
    a = ensure_demo_kb(tmp_path / "a", n_passages=300, n_questions=30, seed=9)
    b = ensure_demo_kb(tmp_path / "b", n_passages=300, n_questions=30, seed=9)
    assert a.corpus_path.read_bytes() == b.corpus_path.read_bytes()
    assert a.questions_path.read_bytes() == b.questions_path.read_bytes()


def test_ensure_regenerates_an_incomplete_folder(tmp_path: Path):
    broken = tmp_path / "demo-300-30-4"
    broken.mkdir()
    (broken / "corpus.jsonl").write_text("")
    kb = ensure_demo_kb(tmp_path, n_passages=300, n_questions=30, seed=4)
    assert len(load_corpus(kb.corpus_path)) == 300
