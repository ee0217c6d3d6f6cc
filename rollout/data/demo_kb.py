"""The built-in demo knowledge base: a generated fictional world, its corpus and its questions.

Questions come in three styles, each favouring a different retriever:

- ``exact``: the question reuses the passage's own wording ("In which city was X born?").
- ``paraphrase``: synonyms the passage does not contain ("What is the birthplace of X?"),
  which dense retrieval bridges and keyword matching does not.
- ``identifier``: the entity is named only by its registry code ("the company with register
  code ORG-5521"), a token that keyword matching finds and an encoder blurs.

Two-hop questions nest a bridge ("the founder of X") whose answer is the subject of the
outer question; their gold passages are the bridge passage and the answer passage.
Question metadata: `gold_doc_ids`, `hops` (1 or 2), `style`, and `relation` (e.g.
"person.birthplace", or "founder>person.birthplace" for a two-hop question).
The same arguments give byte-identical files.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rollout.cache_folder import temp_prefix, writes_cache
from rollout.data.demo_world import Draft, World, article, build_world, fact_drafts, filler_drafts
from rollout.records import Passage, Question

logger = logging.getLogger(__name__)

_MIN_PASSAGES = 60
_FACT_SHARE = 0.75  # the rest of the corpus is distractor filler
_HOPS_SHARE = {1: 0.55, 2: 0.45}
_STYLE_SHARE = {"exact": 0.4, "paraphrase": 0.3, "identifier": 0.3}
_ID_REFERENCE = {"person": "the person with registry ID {id}", "org": "the company with register code {id}"}


@dataclass(frozen=True, slots=True)
class DemoKB:
    """Where a generated demo knowledge base lives on disk."""

    corpus_path: Path
    """FlashRAG corpus: one `{"id", "contents"}` object per line."""
    questions_path: Path
    """One `{"id", "question", "golden_answers", "metadata"}` object per line."""


@dataclass(frozen=True, slots=True)
class _Relation:
    """One fact about an entity kind, and how to ask for it."""

    kind: str
    name: str
    aspect: str
    """Aspect of the passage that states the fact (the registry passage states it too)."""
    exact: str
    """Question in the passage's wording; `{e}` is the entity reference."""
    paraphrase: str
    """Question in other words than the passage's."""
    answers: Callable[[World, str], list[str]]
    """Accepted answers for an entity name; the first appears verbatim in the passage."""


@dataclass(frozen=True, slots=True)
class _Bridge:
    """A relation that leads from one entity to another, used as the first hop."""

    source: str
    target: str
    phrase: str
    aspect: str
    follow: Callable[[World, str], str]


def _org_answers(org: str) -> list[str]:
    return [org, org.split(" ", 1)[0]]


_RELATIONS = (
    _Relation("person", "birthplace", "birth", "In which city was {e} born?",
              "What is the birthplace of {e}?", lambda w, n: [w.persons[n].birthplace]),
    _Relation("person", "birth_year", "birth", "In what year was {e} born?",
              "What is the birth year of {e}?", lambda w, n: [str(w.persons[n].birth_year)]),
    _Relation("person", "occupation", "work", "What does {e} work as?",
              "What is the profession of {e}?",
              lambda w, n: [w.persons[n].occupation,
                            f"{article(w.persons[n].occupation)} {w.persons[n].occupation}"]),
    _Relation("person", "employer", "work", "For which company does {e} work?",
              "Which organisation employs {e}?", lambda w, n: _org_answers(w.persons[n].employer)),
    _Relation("org", "founded", "founding", "In what year was {e} founded?",
              "When was {e} established?", lambda w, n: [str(w.orgs[n].founded)]),
    _Relation("org", "founder", "founding", "Who founded {e}?",
              "Who established {e}?", lambda w, n: [w.orgs[n].founder]),
    _Relation("org", "hq", "hq", "Where is {e} headquartered?",
              "In which city does {e} have its main offices?", lambda w, n: [w.orgs[n].hq]),
    _Relation("org", "industry", "industry", "In which industry does {e} operate?",
              "What line of business is {e} in?",
              lambda w, n: [w.orgs[n].industry, f"{w.orgs[n].industry} industry"]),
    _Relation("city", "country", "country", "{e} is a city in which country?",
              "To which nation does {e} belong?", lambda w, n: [w.cities[n].country]),
    _Relation("city", "population", "population", "What is the population of {e}?",
              "How many people live in {e}?",
              lambda w, n: [f"{w.cities[n].population:,}", str(w.cities[n].population)]),
    _Relation("city", "founded", "founding", "In what year was {e} founded?",
              "When was {e} established?", lambda w, n: [str(w.cities[n].founded)]),
    _Relation("country", "capital", "capital", "What is the capital of {e}?",
              "Which city is {e}'s seat of government?", lambda w, n: [w.countries[n].capital]),
    _Relation("country", "independence", "independence", "In what year did {e} declare independence?",
              "When did {e} become independent?", lambda w, n: [str(w.countries[n].independence)]),
)
# Identifier-only questions: who or what carries a registry code.
_NAME_RELATIONS = (
    _Relation("person", "name", "registry", "Who holds registry ID {e}?", "", lambda w, n: [n]),
    _Relation("org", "name", "registry", "Which company has register code {e}?", "",
              lambda w, n: _org_answers(n)),
)
_BRIDGES = (
    _Bridge("org", "person", "the founder of {e}", "founding", lambda w, n: w.orgs[n].founder),
    _Bridge("person", "org", "the employer of {e}", "work", lambda w, n: w.persons[n].employer),
    _Bridge("person", "city", "the birthplace of {e}", "birth", lambda w, n: w.persons[n].birthplace),
    _Bridge("org", "city", "the headquarters city of {e}", "hq", lambda w, n: w.orgs[n].hq),
    _Bridge("country", "city", "the capital of {e}", "capital", lambda w, n: w.countries[n].capital),
)


class _Asker:
    """Draws questions about one world; `ids` maps (kind, name, aspect) to passage ids."""

    def __init__(self, rng: random.Random, world: World, ids: dict[tuple[str, str, str], str]) -> None:
        self._rng, self._world, self._ids = rng, world, ids
        self._names = {"person": list(world.persons), "org": list(world.orgs),
                       "city": list(world.cities), "country": list(world.countries)}

    def _code(self, kind: str, name: str) -> str:
        return self._world.persons[name].pid if kind == "person" else self._world.orgs[name].code

    def _reference(self, kind: str, name: str, style: str) -> str:
        """How the question names the entity: by name, or by registry code only."""
        if style != "identifier":
            return name
        return _ID_REFERENCE[kind].format(id=self._code(kind, name))

    def _gold(self, kind: str, name: str, aspect: str, style: str) -> str:
        return self._ids[(kind, name, "registry" if style == "identifier" else aspect)]

    def single(self, style: str) -> tuple[str, list[str], list[str], str]:
        relations = [r for r in _RELATIONS if style != "identifier" or r.kind in _ID_REFERENCE]
        if style == "identifier":
            relations += _NAME_RELATIONS
        rel = self._rng.choice(relations)
        name = self._rng.choice(self._names[rel.kind])
        # Name questions ask whose code it is, so they carry the bare code.
        ref = self._code(rel.kind, name) if rel.name == "name" else self._reference(rel.kind, name, style)
        template = rel.paraphrase if style == "paraphrase" else rel.exact
        gold = self._gold(rel.kind, name, rel.aspect, style)
        return template.format(e=ref), rel.answers(self._world, name), [gold], f"{rel.kind}.{rel.name}"

    def two_hop(self, style: str) -> tuple[str, list[str], list[str], str] | None:
        bridges = [b for b in _BRIDGES if style != "identifier" or b.source in _ID_REFERENCE]
        bridge = self._rng.choice(bridges)
        rel = self._rng.choice([r for r in _RELATIONS if r.kind == bridge.target])
        source = self._rng.choice(self._names[bridge.source])
        target = bridge.follow(self._world, source)
        answers = rel.answers(self._world, target)
        if answers[0] == source:  # e.g. the country of a country's capital: no second hop
            return None
        phrase = bridge.phrase.format(e=self._reference(bridge.source, source, style))
        template = rel.paraphrase if style == "paraphrase" else rel.exact
        gold = [self._gold(bridge.source, source, bridge.aspect, style),
                self._ids[(rel.kind, target, rel.aspect)]]
        return template.format(e=phrase), answers, gold, f"{bridge.phrase.split()[1]}>{rel.kind}.{rel.name}"


def _plan(rng: random.Random, n: int) -> list[tuple[int, str]]:
    """(hops, style) for each question, in the configured shares, in random order."""
    plan: list[tuple[int, str]] = []
    for hops, hop_share in _HOPS_SHARE.items():
        n_hops = round(n * hop_share) if hops == 1 else n - len(plan)
        styles = list(_STYLE_SHARE)
        counts = [round(n_hops * _STYLE_SHARE[s]) for s in styles[:-1]]
        counts.append(n_hops - sum(counts))
        plan += [(hops, s) for s, c in zip(styles, counts) for _ in range(c)]
    rng.shuffle(plan)
    return plan


def _ask(rng: random.Random, world: World, ids: dict[tuple[str, str, str], str], n: int) -> list[Question]:
    asker, seen, questions = _Asker(rng, world, ids), set(), []
    for hops, style in _plan(rng, n):
        for _ in range(1000):
            drawn = asker.single(style) if hops == 1 else asker.two_hop(style)
            if drawn is None or drawn[0] in seen or drawn[1][0] in drawn[0]:
                continue
            break
        else:
            raise ValueError(f"the demo world ran out of distinct {style} {hops}-hop questions after "
                             f"{len(questions)}; raise n_passages or lower n_questions")
        text, answers, gold, relation = drawn
        seen.add(text)
        text = text[0].upper() + text[1:]
        metadata = {"gold_doc_ids": gold, "hops": hops, "style": style, "relation": relation}
        questions.append(Question(f"q-{len(questions):06d}", text, answers, metadata))
    return questions


def generate_demo_kb(*, n_passages: int = 2000, n_questions: int = 200,
                     seed: int = 0) -> tuple[list[Passage], list[Question]]:
    """Generate a corpus of exactly `n_passages` passages and `n_questions` questions about it."""
    if n_passages < _MIN_PASSAGES:
        raise ValueError(f"n_passages={n_passages} is too small for a demo world; use at least {_MIN_PASSAGES}")
    if n_questions < 0:
        raise ValueError(f"n_questions={n_questions} must be zero or more")
    rng = random.Random(seed)
    world, namer = build_world(rng, int(n_passages * _FACT_SHARE))
    drafts: list[Draft] = fact_drafts(world)
    drafts += filler_drafts(rng, world, namer, n_passages - len(drafts))
    rng.shuffle(drafts)
    width = max(6, len(str(n_passages - 1)))
    passages = [Passage(f"doc-{i:0{width}d}", d.title, d.text) for i, d in enumerate(drafts)]
    ids = {d.key: p.id for d, p in zip(drafts, passages) if d.key is not None}
    return passages, _ask(rng, world, ids, n_questions)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


@writes_cache
def ensure_demo_kb(cache_dir: Path, *, n_passages: int = 2000, n_questions: int = 200,
                   seed: int = 0) -> DemoKB:
    """Generate the demo knowledge base under `cache_dir` once; later calls reuse the files."""
    cache_dir = Path(cache_dir)
    target = cache_dir / f"demo-{n_passages}-{n_questions}-{seed}"
    kb = DemoKB(target / "corpus.jsonl", target / "questions.jsonl")
    if kb.corpus_path.is_file() and kb.questions_path.is_file():
        return kb
    if target.exists():
        logger.warning("removing incomplete demo knowledge base at %s", target)
        shutil.rmtree(target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    passages, questions = generate_demo_kb(n_passages=n_passages, n_questions=n_questions, seed=seed)
    # Written into a scratch folder and renamed, so readers never see half a knowledge base.
    scratch = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), dir=cache_dir))
    try:
        _write_jsonl(scratch / kb.corpus_path.name, [p.to_json() for p in passages])
        _write_jsonl(scratch / kb.questions_path.name, [q.to_json() for q in questions])
        os.rename(scratch, target)
    except OSError:
        if not (kb.corpus_path.is_file() and kb.questions_path.is_file()):
            raise
        logger.debug("another process wrote %s first; using its files", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    logger.debug("demo knowledge base ready at %s", target)
    return kb
