"""A BrowseComp-Plus in miniature, in its exact formats, generated (deterministic, no download).

    python -m tests.data.browsecomp_fixture DIR     # writes it into DIR and prints the run's overrides

- `corpus.jsonl` and `corpus.parquet`: rows `{"docid", "text", "url"}` as `Tevatron/browsecomp-plus-corpus` has
  them: 14 web pages of 2,000 to 3,000 words each, numeric docids, a front matter and a heading first.
- `browsecomp_plus_decrypted.jsonl`: the queries as BrowseComp-Plus' `decrypt_dataset.py` writes them:
  `query_id`, `query`, `answer`, and `evidence_docs`, `gold_docs`, `negative_docs` (lists of `{docid, text, url}`).
- `qrel_evidence.txt` and `qrel_golds.txt`: TREC qrels, `qid Q0 docid 1`, as in its `topics-qrels/`.

Each queried institution has a page of its own that states its answer once, some 1,500 words in ("The harbor code
of the Velmora Institute is Amber Lantern."), and is named in a second page (evidence, not gold); two more
institutions and two pages about nothing in particular are distractors. Every other sentence is drawn from a
fixed vocabulary by a seeded generator.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SEED = 35
VOCABULARY = (
    "archive ledger harbor valley council river market bridge mill orchard lantern quarry tower garden charter "
    "assembly painter weaver founder season voyage channel meadow beacon festival record survey engineer scholar "
    "granary canal workshop merchant caravan glacier pasture signal almanac museum district parish estate treaty "
    "northern eastern annual ancient coastal rural modest famous quiet local formal early later several many "
    "built opened moved restored recorded described visited founded listed traded mapped repaired studied hosted"
).split()
ENTITIES = ("Velmora Institute", "Quorran Observatory", "Tessaly Mill", "Brandor Choir", "Ostrel Ferry",
            "Kalvin Archive")
ATTRIBUTES = ("harbor code", "founding motto", "patron saint", "signal color", "ledger name", "winter route")
ANSWERS = ("Amber Lantern", "Seven Quiet Rivers", "Saint Odile", "Cobalt Green", "The Grey Book", "Pellan Pass")
QUERIED = 4
"""The first four institutions have a query each; the last two are distractors."""
FACT_AT_WORDS = 1500
"""Where a page states its answer: past the first 512 tokens of any tokenizer, so only get_document shows it."""


@dataclass(frozen=True, slots=True)
class BrowseCompFixture:
    """The files, and what a test checks against."""

    folder: Path
    corpus_jsonl: Path
    corpus_parquet: Path
    queries: Path
    qrel_evidence: Path
    qrel_gold: Path
    documents: dict[str, str]
    """docid → text."""
    answers: dict[str, str]
    """query_id → answer (for the tests' assertions; the agent stand-in never reads it)."""
    evidence: dict[str, list[str]]
    gold: dict[str, list[str]]

    def overrides(self, corpus: str = "jsonl") -> list[str]:
        """The run's dataset overrides for these files."""
        path = self.corpus_jsonl if corpus == "jsonl" else self.corpus_parquet
        return ["dataset=browsecomp_plus", f"dataset.corpus.path={path}", f"dataset.questions.path={self.queries}",
                f"dataset.qrels.evidence={self.qrel_evidence}", f"dataset.qrels.gold={self.qrel_gold}"]


def _sentence(rng: random.Random, extra: str = "") -> str:
    words = [rng.choice(VOCABULARY) for _ in range(rng.randint(8, 15))]
    if extra:
        words.insert(rng.randint(1, len(words) - 1), extra)
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def _page(rng: random.Random, title: str, words: int, mentions: tuple[str, ...], fact: str | None) -> str:
    """A page of about `words` words: front matter, a heading, paragraphs; `mentions` are named now and then, and
    `fact`, a sentence, comes once about FACT_AT_WORDS words in."""
    paragraphs: list[str] = []
    sentences: list[str] = []
    count, placed = 0, fact is None
    while count < words:
        extra = rng.choice(mentions) if mentions and rng.random() < 0.25 else ""
        if not placed and count >= FACT_AT_WORDS:
            sentences.append(fact)
            placed = True
        sentences.append(_sentence(rng, extra))
        count += len(sentences[-1].split())
        if len(sentences) >= rng.randint(5, 8):
            paragraphs.append(" ".join(sentences))
            sentences = []
    if sentences:
        paragraphs.append(" ".join(sentences))
    intro = f"{title} is described on this page." if not mentions else f"This page is about the {title}."
    return f"---\ntitle: {title}\n---\n\n# {title}\n\n{intro}\n\n" + "\n\n".join(paragraphs) + "\n"


def generate() -> tuple[list[dict[str, str]], list[dict[str, object]], dict[str, list[str]], dict[str, list[str]]]:
    """(corpus rows, query records, evidence qrels, gold qrels), the same on every call."""
    rng = random.Random(SEED)
    rows: list[dict[str, str]] = []

    def add(title: str, text: str) -> str:
        docid = str(10_000 + 37 * len(rows))
        slug = title.lower().replace(" ", "-")
        rows.append({"docid": docid, "text": text, "url": f"https://example.org/{slug}"})
        return docid

    own: dict[str, str] = {}
    second: dict[str, str] = {}
    for entity, attribute, answer in zip(ENTITIES, ATTRIBUTES, ANSWERS, strict=True):
        fact = f"The {attribute} of the {entity} is {answer}."
        own[entity] = add(entity, _page(rng, entity, rng.randint(2000, 3000), (entity,), fact))
    for i, entity in enumerate(ENTITIES):
        neighbour = ENTITIES[(i + 1) % len(ENTITIES)]
        title = f"Travels along the {neighbour.split()[0]} coast"
        second[entity] = add(title, _page(rng, title, rng.randint(2000, 3000), (entity, neighbour), None))
    for title in ("A survey of rural granaries", "Notes on the annual festival"):
        add(title, _page(rng, title, rng.randint(2000, 3000), (), None))
    by_id = {row["docid"]: row for row in rows}
    queries, evidence, gold = [], {}, {}
    for n, (entity, attribute, answer) in enumerate(zip(ENTITIES, ATTRIBUTES, ANSWERS, strict=True)):
        if n >= QUERIED:
            break
        qid = str(101 + n)
        evidence[qid], gold[qid] = [own[entity], second[entity]], [own[entity]]
        negatives = [own[ENTITIES[-1]]]
        queries.append({"query_id": qid, "query": f"What is the {attribute} of the {entity}?", "answer": answer,
                        "evidence_docs": [by_id[d] for d in evidence[qid]], "gold_docs": [by_id[d] for d in gold[qid]],
                        "negative_docs": [by_id[d] for d in negatives]})
    return rows, queries, evidence, gold


def write_fixture(folder: Path) -> BrowseCompFixture:
    """The fixture's files in `folder` (written once, atomically: workers of one session may ask at once)."""
    folder = Path(folder)
    rows, queries, evidence, gold = generate()
    if not (folder / "qrel_golds.txt").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        _write(tmp, rows, queries, evidence, gold)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / "qrel_golds.txt").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another worker wrote the same files first
    return BrowseCompFixture(folder, folder / "corpus.jsonl", folder / "corpus.parquet",
                             folder / "browsecomp_plus_decrypted.jsonl", folder / "qrel_evidence.txt",
                             folder / "qrel_golds.txt", {r["docid"]: r["text"] for r in rows},
                             {str(q["query_id"]): str(q["answer"]) for q in queries}, evidence, gold)


def _write(folder: Path, rows: list[dict[str, str]], queries: list[dict[str, object]],
           evidence: dict[str, list[str]], gold: dict[str, list[str]]) -> None:
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    pq.write_table(pa.Table.from_pylist(rows), folder / "corpus.parquet")
    with (folder / "browsecomp_plus_decrypted.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in queries)
    for name, judged in (("qrel_evidence.txt", evidence), ("qrel_golds.txt", gold)):
        (folder / name).write_text("".join(f"{qid} Q0 {docid} 1\n" for qid, docs in judged.items() for docid in docs),
                                   encoding="utf-8")


if __name__ == "__main__":
    written = write_fixture(Path(sys.argv[1]))
    print(" ".join(written.overrides()))
