"""A fictional world for the demo knowledge base: invented entities, their facts, their passages.

Everything is drawn from one `random.Random`, so a seed fixes the world. Names are built from
syllables and never repeat across entity kinds, so a name identifies one entity; surnames are
shared on purpose, so that keyword search meets near-misses. `demo_kb` turns a world into
corpus and question files.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "j", "k", "kr", "l", "m", "n",
           "p", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei")  # plain vowels twice as likely
_CODAS = ("", "", "n", "r", "l", "s", "th", "x", "m", "nd", "rk", "st", "v")

OCCUPATIONS = (
    "cartographer", "architect", "surgeon", "geologist", "librarian", "pharmacist", "botanist",
    "translator", "economist", "journalist", "veterinarian", "sculptor", "astronomer", "chemist",
    "historian", "mathematician", "photographer", "engineer", "accountant", "nurse", "pilot",
    "lawyer", "teacher", "chef", "electrician", "carpenter", "musician", "novelist", "physicist",
    "statistician",
)
INDUSTRIES = (
    "biotechnology", "shipping", "aerospace", "textile", "mining", "insurance", "robotics",
    "agriculture", "publishing", "telecommunications", "pharmaceutical", "logistics", "forestry",
    "brewing", "semiconductor", "tourism", "fishing", "banking", "ceramics", "cosmetics",
)
ORG_SUFFIXES = ("Holdings", "Industries", "Labs", "Group", "Works", "Systems", "Partners",
                "Foundry", "Collective", "Trading")
_TOPICS = ("river surveys", "urban planning", "old maps", "soil chemistry", "folk music",
           "tidal energy", "glass making", "bird migration", "public libraries", "salt trade")
_ADJECTIVES = ("quiet", "crowded", "ancient", "colourful", "windy", "narrow", "busy", "green")
_FEATURES = ("harbour", "market square", "bridges", "old walls", "gardens", "clock tower")
_EVENTS = ("flood", "fire", "festival", "harvest fair", "trade dispute", "royal visit")

# Passage wording. `demo_kb` writes questions against these sentences, so the two must agree.
PERSON_TEXT = {
    "birth": "{name} was born in {birthplace} in {birth_year}.",
    "work": "{name} works as {occ_article} {occupation} for {employer}.",
    "registry": ("In the civil registry, record {pid} belongs to {name}, who works as "
                 "{occ_article} {occupation}, was born in {birthplace} in {birth_year} and is "
                 "employed by {employer}."),
}
ORG_TEXT = {
    "founding": "{name} was founded in {founded} by {founder}.",
    "hq": "{name} is headquartered in {hq}.",
    "industry": "{name} operates in the {industry} industry.",
    "registry": ("In the company register, entry {code} is {name}, a firm in the {industry} "
                 "industry that was founded in {founded} by {founder} and is headquartered "
                 "in {hq}."),
}
CITY_TEXT = {
    "country": "{name} is a city in {country}.",
    "population": "{name} has a population of {population:,}.",
    "founding": "{name} was founded in {founded}.",
}
COUNTRY_TEXT = {
    "capital": "The capital of {name} is {capital}.",
    "independence": "{name} declared independence in {independence}.",
}
_FILLER_TEXT = {
    "talk": "{person} gave a talk on {topic} in {city} in {year}.",
    "namesake": ("{namesake}, {occ_article} {occupation} from {city}, is not related to the "
                 "other {surname} families of the region."),
    "branch": "{org} opened a branch office in {city} in {year}.",
    "deal": "{org} signed a supply agreement with {other_org} in {year}.",
    "travel": "Visitors to {city} often remark on its {adjective} {feature}.",
    "history": "Archives in {city} describe a {adjective} {event} that took place in {year}.",
}
_FILLER_WEIGHTS = {"talk": 3, "namesake": 3, "branch": 2, "deal": 1, "travel": 1, "history": 1}

# Invented words must not read as template words, or keyword search would match them.
_TEMPLATE_WORDS = frozenset(
    w.lower()
    for table in (PERSON_TEXT, ORG_TEXT, CITY_TEXT, COUNTRY_TEXT, _FILLER_TEXT)
    for text in table.values()
    for w in re.findall(r"[A-Za-z]+", re.sub(r"\{[^}]*\}", " ", text))
)


@dataclass(frozen=True, slots=True)
class Person:
    name: str
    """Full name, "First Surname"; unique in the world."""
    pid: str
    """Civil registry id, e.g. "P-48213"."""
    birthplace: str
    """City name."""
    birth_year: int
    occupation: str
    employer: str
    """Organisation name."""


@dataclass(frozen=True, slots=True)
class Org:
    name: str
    """"Word Suffix", e.g. "Veltrix Holdings"; unique in the world."""
    code: str
    """Company register code, e.g. "ORG-5521"."""
    hq: str
    """City name of the headquarters."""
    founded: int
    founder: str
    """Person name."""
    industry: str


@dataclass(frozen=True, slots=True)
class City:
    name: str
    country: str
    population: int
    founded: int


@dataclass(frozen=True, slots=True)
class Country:
    name: str
    capital: str
    """City name; the capital is also one of the country's cities."""
    independence: int


@dataclass(slots=True)
class World:
    """All entities of one generated world, by name."""

    persons: dict[str, Person] = field(default_factory=dict)
    orgs: dict[str, Org] = field(default_factory=dict)
    cities: dict[str, City] = field(default_factory=dict)
    countries: dict[str, Country] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Draft:
    """A passage before it gets its corpus id."""

    title: str
    text: str
    key: tuple[str, str, str] | None
    """(entity kind, entity name, aspect) for fact passages; None for filler."""


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


class Namer:
    """Invents capitalised words that are never handed out twice, and keeps the name pools."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set(_TEMPLATE_WORDS)
        self.firsts: list[str] = []
        """First names people draw from."""
        self.surnames: list[str] = []
        """Surnames people draw from; shared by several people on purpose."""
        self.people: set[str] = set()
        """Full names already given to someone, facts and filler alike."""

    def word(self) -> str:
        rng = self._rng
        misses = 0
        while True:
            # Two syllables read best; a third comes in only when two-syllable words run short.
            n = 2 + (misses > 8) + (misses > 64)
            w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(n))
            w += rng.choice(_CODAS)
            if len(w) >= 4 and w not in self._used:
                self._used.add(w)
                return w.capitalize()
            misses += 1

    def words(self, n: int) -> list[str]:
        return [self.word() for _ in range(n)]


def entity_counts(n_fact_passages: int) -> tuple[int, int, int, int]:
    """How many persons, orgs, cities, countries give about `n_fact_passages` fact passages."""
    # Per person 3 passages; per person also 0.15 orgs (4 each), 0.15 cities (3), 0.02 countries (2).
    persons = max(6, int(n_fact_passages / (3 + 0.15 * 4 + 0.15 * 3 + 0.02 * 2)))
    orgs = max(3, int(persons * 0.15))
    cities = max(4, int(persons * 0.15))
    countries = max(2, min(cities // 2, int(persons * 0.02)))
    return persons, orgs, cities, countries


def _registry_ids(rng: random.Random, prefix: str, n: int, min_digits: int) -> list[str]:
    # Codes start above 2100 so that they never read as a year in the world.
    digits = max(min_digits, len(str(n * 10)))
    low = max(10 ** (digits - 1), 2100)
    return [f"{prefix}-{v}" for v in rng.sample(range(low, 10**digits), n)]


def build_world(rng: random.Random, n_fact_passages: int) -> tuple[World, Namer]:
    """Draw entities and their relations; the namer is returned for filler names."""
    n_persons, n_orgs, n_cities, n_countries = entity_counts(n_fact_passages)
    namer = Namer(rng)
    world = World()

    city_names = namer.words(n_cities)
    country_names = namer.words(n_countries)
    # Every country gets at least one city; its first city is its capital.
    city_country = country_names + [rng.choice(country_names) for _ in range(n_cities - n_countries)]
    rng.shuffle(city_country)
    for name, country in zip(city_names, city_country):
        world.cities[name] = City(name, country, rng.randint(5_000, 2_500_000), rng.randint(1100, 1899))
    capitals: dict[str, str] = {}
    for city, country in zip(city_names, city_country):
        capitals.setdefault(country, city)
    for name in country_names:
        world.countries[name] = Country(name, capitals[name], rng.randint(1800, 1990))

    namer.firsts = namer.words(max(8, n_persons // 2))
    namer.surnames = namer.words(max(8, n_persons // 3))
    person_names: list[str] = []
    while len(person_names) < n_persons:
        name = f"{rng.choice(namer.firsts)} {rng.choice(namer.surnames)}"
        if name not in namer.people:
            namer.people.add(name)
            person_names.append(name)
    birth = {n: (rng.choice(city_names), rng.randint(1930, 2000)) for n in person_names}

    org_names = [f"{w} {rng.choice(ORG_SUFFIXES)}" for w in namer.words(n_orgs)]
    founders = rng.sample(person_names, n_orgs)
    for name, founder, code in zip(org_names, founders, _registry_ids(rng, "ORG", n_orgs, 4)):
        born = birth[founder][1]
        founded = born + rng.randint(22, max(22, min(50, 2023 - born)))
        world.orgs[name] = Org(name, code, rng.choice(city_names), founded, founder,
                               rng.choice(INDUSTRIES))

    for name, pid in zip(person_names, _registry_ids(rng, "P", n_persons, 5)):
        world.persons[name] = Person(name, pid, birth[name][0], birth[name][1],
                                     rng.choice(OCCUPATIONS), rng.choice(org_names))
    return world, namer


def fact_drafts(world: World) -> list[Draft]:
    """One passage per entity aspect; every passage names its entity."""
    drafts: list[Draft] = []
    for p in world.persons.values():
        fields = {"name": p.name, "pid": p.pid, "birthplace": p.birthplace, "birth_year": p.birth_year,
                  "occupation": p.occupation, "occ_article": article(p.occupation), "employer": p.employer}
        drafts += [Draft(p.name, t.format(**fields), ("person", p.name, a)) for a, t in PERSON_TEXT.items()]
    for o in world.orgs.values():
        fields = {"name": o.name, "code": o.code, "hq": o.hq, "founded": o.founded,
                  "founder": o.founder, "industry": o.industry}
        drafts += [Draft(o.name, t.format(**fields), ("org", o.name, a)) for a, t in ORG_TEXT.items()]
    for c in world.cities.values():
        fields = {"name": c.name, "country": c.country, "population": c.population, "founded": c.founded}
        drafts += [Draft(c.name, t.format(**fields), ("city", c.name, a)) for a, t in CITY_TEXT.items()]
    for k in world.countries.values():
        fields = {"name": k.name, "capital": k.capital, "independence": k.independence}
        drafts += [Draft(k.name, t.format(**fields), ("country", k.name, a)) for a, t in COUNTRY_TEXT.items()]
    return drafts


def filler_drafts(rng: random.Random, world: World, namer: Namer, n: int) -> list[Draft]:
    """Distractors: passages that share names, cities and years with the facts but answer nothing."""
    persons, orgs, cities = list(world.persons), list(world.orgs), list(world.cities)
    kinds, weights = list(_FILLER_WEIGHTS), list(_FILLER_WEIGHTS.values())
    drafts: list[Draft] = []
    for kind in rng.choices(kinds, weights, k=n):
        year, city = rng.randint(1900, 2023), rng.choice(cities)
        if kind == "talk":
            title = rng.choice(persons)
            text = _FILLER_TEXT[kind].format(person=title, topic=rng.choice(_TOPICS), city=city, year=year)
        elif kind == "namesake":
            surname = world.persons[rng.choice(persons)].name.split(" ", 1)[1]
            title = f"{rng.choice(namer.firsts)} {surname}"
            if title in namer.people:  # never a second person with someone's full name
                title = f"{namer.word()} {surname}"
            namer.people.add(title)
            occupation = rng.choice(OCCUPATIONS)
            text = _FILLER_TEXT[kind].format(namesake=title, occ_article=article(occupation),
                                             occupation=occupation, city=city, surname=surname)
        elif kind in ("branch", "deal"):
            title = rng.choice(orgs)
            other = rng.choice(orgs)
            text = _FILLER_TEXT[kind].format(org=title, other_org=other, city=city, year=year)
        else:
            title = city
            text = _FILLER_TEXT[kind].format(city=city, year=year, adjective=rng.choice(_ADJECTIVES),
                                             feature=rng.choice(_FEATURES), event=rng.choice(_EVENTS))
        drafts.append(Draft(title, text, None))
    return drafts
