"""Reading for the heuristic agent: what a question asks, and which span of a passage answers it.

This is the offline stand-in for a language model's reading. It knows English phrasing —
wh-words, nouns that name a kind of answer, "the founder of X" as a nested reference — and
nothing about any particular corpus. Answers are scored by how well their sentence matches
the question and how close they sit to the words the question and the sentence share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

AnswerType = Literal["person", "org", "place", "year", "number", "proper", "term"]

_STOPWORDS = frozenset("""
a an the of in on at to for from by with and or as is are was were be been being do does did
what which who whom whose where when how many much this that these those it its his her their
there than then has have had into about after before during under over not no any some
""".split())
# Nouns that name the kind of answer wanted ("which city", "the founder of").
_NOUN_TYPES: dict[str, AnswerType] = {
    **dict.fromkeys(("city", "town", "country", "nation", "capital", "birthplace", "hometown",
                     "headquarters", "place", "location", "region", "state", "village"), "place"),
    **dict.fromkeys(("company", "organisation", "organization", "firm", "employer", "corporation",
                     "agency", "institution", "business"), "org"),
    **dict.fromkeys(("founder", "creator", "person", "author", "owner", "leader", "director",
                     "inventor", "employee"), "person"),
    **dict.fromkeys(("profession", "occupation", "job", "industry", "sector", "trade"), "term"),
    "year": "year",
    "population": "number",
}
# How a passage tends to state a relation named by a noun; used to phrase the first hop.
_RELATION_CUES = {
    "founder": "founded by", "creator": "created by", "owner": "owned by", "author": "written by",
    "employer": "works for employed by", "birthplace": "born in", "hometown": "born in",
    "headquarters": "headquartered in",
}
_ORG_SUFFIXES = frozenset(("Holdings", "Industries", "Labs", "Group", "Works", "Systems", "Partners",
                           "Foundry", "Collective", "Trading", "Inc", "Ltd", "Corporation", "Company",
                           "Corp", "Ventures", "Enterprises", "Bank", "University", "Institute"))
# Words that, just before a span, announce its kind ("born in Kelmor", "founded by Arlen Voss").
_LEAD_WORDS: dict[AnswerType, frozenset[str]] = {
    "place": frozenset(("in", "at", "from", "near", "to")),
    "person": frozenset(("by",)), "proper": frozenset(("by", "for", "to")),
    "org": frozenset(("for", "by", "at", "with")),
    "year": frozenset(("in", "since")), "number": frozenset(("of", "about")),
    "term": frozenset(("a", "an", "as")),
}

_TOKEN = re.compile(r"[A-Za-z]+-\d+|\d{1,3}(?:,\d{3})+|\d+|[A-Za-z][A-Za-z'’-]*|[^\sA-Za-z\d]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\d\"'])")
_YEAR = re.compile(r"(?:1\d{3}|20\d{2})")
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
IDENTIFIER = re.compile(r"\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[\w-]+\b|\"[^\"]+\"")
"""Codes that mix letters and digits (ORG-5521, P-48213), and quoted strings."""

_NAME = r"[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*"
_ID_REFERENCE = r"the\s+\w+\s+with\s+(?:[\w-]+\s+){0,3}?[A-Z]+-\d+"
_BRIDGE = re.compile(rf"\b[Tt]he\s+((?:[a-z]+\s+)?[a-z]+)\s+of\s+({_ID_REFERENCE}|{_NAME})")
_TARGET_ONLY = re.compile(r"\s*(?:what|who|which\s+\w+)\s+(?:is|was|are|were)\s+X\s*\??\s*", re.I)


@dataclass(frozen=True, slots=True)
class Bridge:
    """A nested reference that must be resolved first ("the founder of Veltrix Holdings")."""

    phrase: str
    """The reference as written in the question."""
    noun: str
    """The relation noun ("founder", "headquarters city")."""
    subject: str
    """What the relation is about ("Veltrix Holdings" or an identifier reference)."""
    answer_type: AnswerType
    """Kind of entity the reference stands for."""
    query: str
    """Search query that finds it."""


@dataclass(frozen=True, slots=True)
class QuestionPlan:
    """What one question asks for, and whether it needs a first hop."""

    question: str
    answer_type: AnswerType
    bridge: Bridge | None

    def resolved(self, entity: str) -> str:
        """The question with the bridge replaced by the entity it stands for."""
        if self.bridge is None:
            return self.question
        text = self.question.replace(self.bridge.phrase, entity, 1)
        return text[0].upper() + text[1:]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One retrieved passage as the reader sees it."""

    title: str
    text: str
    rank: int
    """0 for the search's best hit."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A span proposed as the answer."""

    text: str
    score: float


def stem(word: str) -> str:
    """A crude stem, enough to match "founder"/"founded" and "works"/"work"."""
    w = word.lower().removesuffix("'s").removesuffix("’s")
    for _ in range(2):
        for suffix in ("ations", "ation", "ings", "ing", "ers", "er", "ed", "es", "s"):
            if w.endswith(suffix) and len(w) - len(suffix) >= 4:
                w = w[: -len(suffix)]
                break
    return w


def _plain(word: str) -> str:
    return word.lower().removesuffix("'s").removesuffix("’s")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def answer_type(question: str) -> AnswerType:
    """The kind of answer a question wants, from its wh-word and the nouns around it."""
    low = question.lower()
    if re.search(r"\bhow (?:many|much)\b|\bpopulation\b|\bnumber of\b", low):
        return "number"
    if re.search(r"\bwhen\b|\byears?\b", low):
        return "year"
    asked = re.search(r"\b(?:which|what)\s+(\w+)", low)
    if asked and asked.group(1) in _NOUN_TYPES:
        return _NOUN_TYPES[asked.group(1)]
    relation = re.search(r"\bthe\s+((?:\w+\s+)?\w+)\s+of\b", low)
    if relation:
        for word in reversed(relation.group(1).split()):
            if word in _NOUN_TYPES:
                return _NOUN_TYPES[word]
    if re.search(r"\bwhere\b", low):
        return "place"
    if re.search(r"\bwho(?:m)?\b", low):
        return "proper"
    return "term"


def _bridge_type(noun: str) -> AnswerType:
    for word in reversed(noun.split()):
        if word in _NOUN_TYPES:
            return _NOUN_TYPES[word]
    return "proper"


def plan_question(question: str) -> QuestionPlan:
    """Find a nested reference the outer question depends on, and the answer type of each part."""
    question = question.strip()
    match = _BRIDGE.search(question)
    if match:
        rest = question[: match.start()] + "X" + question[match.end():]
        if not _TARGET_ONLY.fullmatch(rest):
            noun, subject = match.group(1), match.group(2)
            cue = next((_RELATION_CUES[w] for w in noun.split() if w in _RELATION_CUES), noun)
            bridge = Bridge(match.group(0), noun, subject, _bridge_type(noun), f"{subject} {cue}")
            return QuestionPlan(question, answer_type(rest), bridge)
    return QuestionPlan(question, answer_type(question), None)


def keywords(text: str) -> str:
    """The content words of a text, for a second try at a search."""
    words = [t for t in tokens(text) if t[0].isalnum() and t.lower() not in _STOPWORDS]
    return " ".join(words) or text


@dataclass(frozen=True, slots=True)
class _Term:
    stem: str
    weight: float
    """Names and identifiers count more than ordinary words."""
    relation: bool
    """An ordinary word outside any entity reference ("born", "founded", "industry")."""


def _question_terms(question: str) -> list[_Term]:
    references = [m.span() for m in re.finditer(_ID_REFERENCE, question, re.I)]
    terms: dict[str, _Term] = {}
    for i, match in enumerate(_TOKEN.finditer(question)):
        tok = match.group(0)
        if not tok[0].isalnum() or tok.lower() in _STOPWORDS:
            continue
        is_name = any(c.isdigit() for c in tok) or (tok[0].isupper() and i > 0)
        in_reference = any(a <= match.start() < b for a, b in references)
        term = _Term(stem(tok), 3.0 if is_name else 1.0, not (is_name or in_reference))
        known = terms.get(term.stem)
        if known is None or known.weight < term.weight:
            terms[term.stem] = term
    return list(terms.values())


def _spans(toks: Sequence[str], kind: AnswerType) -> list[tuple[int, int]]:
    """Token ranges [start, end) that could be an answer of this kind."""
    if kind == "year":
        return [(i, i + 1) for i, t in enumerate(toks) if _YEAR.fullmatch(t)]
    if kind == "number":
        return [(i, i + 1) for i, t in enumerate(toks) if _NUMBER.fullmatch(t)]
    if kind == "term":
        return [(i, i + 1) for i, t in enumerate(toks)
                if t.isalpha() and t.islower() and len(t) > 2 and t not in _STOPWORDS]
    spans, i = [], 0
    while i < len(toks):
        if not (toks[i][0].isupper() and toks[i][0].isalpha()) or toks[i].lower() in _STOPWORDS:
            i += 1
            continue
        j = i
        while j < len(toks) and toks[j][0].isupper() and toks[j][0].isalpha() and "-" not in toks[j]:
            j += 1
        if j > i:
            spans.append((i, j))
        i = max(j, i + 1)
    org = [(s, e) for s, e in spans if toks[e - 1] in _ORG_SUFFIXES]
    if kind == "org":
        return org or [(s, e) for s, e in spans if e - s >= 2]
    if kind in ("person", "place"):
        return [sp for sp in spans if sp not in org and (kind == "place" or sp[1] - sp[0] >= 2)]
    return [(s, e) for s, e in spans if e - s >= 2]  # proper: people and organisations


def _span_score(toks: Sequence[str], start: int, end: int, kind: AnswerType,
                matched: Sequence[tuple[int, bool]]) -> float:
    """Closeness to the words shared with the question; answers tend to follow them.

    Relation words ("born", "industry") place an answer better than names do, so names
    count only in a sentence that shares no relation word with the question.
    """
    anchors = [pos for pos, relation in matched if relation]
    factor = 1.0 if anchors else 0.6
    closeness = 0.0
    for pos in anchors or [pos for pos, _ in matched]:
        if pos < start:
            closeness = max(closeness, factor / (start - pos))
        elif pos >= end:
            closeness = max(closeness, 0.5 * factor / (pos - end + 1))
    lead = 0.3 if start > 0 and toks[start - 1].lower() in _LEAD_WORDS[kind] else 0.0
    # A capitalised first word may just be capitalised because it starts the sentence.
    penalty = 0.2 if start == 0 and kind in ("place", "person", "org", "proper") else 0.0
    if kind == "number" and "," not in toks[start] and _YEAR.fullmatch(toks[start]):
        penalty += 0.8  # a bare four-digit number in a count question is more often a year
    if kind == "place" and end - start > 1:
        penalty += 0.3  # multi-word capitalised runs are more often people
    return closeness + lead - penalty


def extract_answer(question: str, kind: AnswerType, evidence: Sequence[Evidence]) -> Candidate | None:
    """The best span of the wanted kind in the evidence, or None when there is none."""
    terms = _question_terms(question)
    asked = {_plain(t) for t in tokens(question)}
    asked_stems = {t.stem for t in terms}
    best: dict[str, Candidate] = {}
    for ev in evidence:
        for sentence in _SENTENCE_END.split(ev.text):
            toks = tokens(sentence)
            stems = [stem(t) for t in toks]
            matched: list[tuple[int, bool]] = []
            overlap = 0.0
            for term in terms:
                positions = [i for i, s in enumerate(stems) if s == term.stem]
                if positions:
                    overlap += term.weight
                    matched += [(i, term.relation) for i in positions]
            for start, end in _spans(toks, kind):
                words = toks[start:end]
                if all(_plain(w) in asked or stems[i] in asked_stems
                       for i, w in zip(range(start, end), words)):
                    continue  # the question's own words are not its answer
                partial = 1.0 if any(_plain(w) in asked for w in words) else 0.0
                score = (overlap + _span_score(toks, start, end, kind, matched)
                         + 0.2 / (1 + ev.rank) - partial)
                text = " ".join(words)
                known = best.get(text)
                if known is not None:
                    # Found again about as strongly elsewhere: a little more believable.
                    agree = abs(known.score - score) < 0.5
                    score = max(score, known.score) + (0.1 if agree else 0.0)
                best[text] = Candidate(text, score)
    if not best:
        return None
    return max(best.values(), key=lambda c: c.score)


def guess_without_evidence(plan: QuestionPlan) -> str:
    """What a reader with no passages says: a name from the question, or a stock guess."""
    if plan.answer_type == "year":
        return "1950"
    if plan.answer_type == "number":
        return "10,000"
    names = [m.group(0) for m in re.finditer(_NAME, plan.question) if m.start() > 0]
    return names[-1] if names else ""
