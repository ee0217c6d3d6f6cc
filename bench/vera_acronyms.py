"""A public corpus and question set from V.E.R.A., the computing acronyms dictionary Debian ships as dict-vera.

    apt-get install dict-vera
    python -m bench.vera_acronyms /usr/share/dictd/vera.dict.dz /usr/share/dictd/vera.index data/vera

writes `data/vera/corpus.jsonl` (one passage an entry: title the acronym, text its expansion and the words VERA files
it under) and `data/vera/questions.jsonl` ("What does the acronym X stand for?", the gold answer the expansion), in
FlashRAG's fields, for `dataset=files`. Questions are drawn, with a fixed seed, from acronyms that have a single
entry whose expansion is plain words (no VERA bracket or quote notation), so each question has one answer and it is
the text of one passage (its `gold_doc_ids`). Nobody here wrote the text: a model that knows the acronym answers
without searching; one that does not must find its passage, by its letters (BM25) or by meaning (dense).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64_number(text: str) -> int:
    """dictd's index writes offsets and lengths in its own base 64 (most significant digit first)."""
    value = 0
    for char in text:
        value = value * 64 + _B64.index(char)
    return value


def read_entries(dict_path: Path, index_path: Path) -> list[tuple[str, str]]:
    """(acronym as written, its definition on one line) for each entry, in the index's order."""
    opener = gzip.open if dict_path.suffix == ".dz" else open
    with opener(dict_path, "rb") as f:
        data = f.read()
    entries = []
    for line in index_path.read_text(encoding="utf-8").splitlines():
        word, offset, length = line.split("\t")
        if word.startswith("00-database") or word.startswith("00database"):
            continue
        start, size = _b64_number(offset), _b64_number(length)
        head, _, body = data[start:start + size].decode("utf-8", "replace").partition("\n")
        definition = " ".join(body.split())
        if definition:
            entries.append((head.strip(), definition))
    return entries


def _expansion(definition: str) -> str | None:
    """The expansion before VERA's parenthesised topics, or None when it uses bracket or quote notation."""
    expansion = definition.split(" (")[0].strip().rstrip(",")
    if re.search(r"[\[\]\"()]", expansion) or len(expansion.split()) < 2:
        return None
    return expansion


def build(dict_path: Path, index_path: Path, out: Path, n_questions: int = 200, seed: int = 0) -> tuple[int, int]:
    entries = read_entries(dict_path, index_path)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for acronym, _ in entries:
        counts[acronym.lower()] = counts.get(acronym.lower(), 0) + 1
    candidates = []
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for row, (acronym, definition) in enumerate(entries):
            doc_id = f"vera-{row}"
            corpus.write(json.dumps({"id": doc_id, "contents": f"{acronym}\n{acronym}: {definition}"}) + "\n")
            expansion = _expansion(definition)
            if expansion and counts[acronym.lower()] == 1:
                candidates.append((doc_id, acronym, expansion))
    picked = random.Random(seed).sample(candidates, min(n_questions, len(candidates)))
    with open(out / "questions.jsonl", "w", encoding="utf-8") as questions:
        for i, (doc_id, acronym, expansion) in enumerate(picked):
            questions.write(json.dumps({"id": f"vera-q{i}", "question": f"What does the acronym {acronym} stand for?",
                                        "golden_answers": [expansion], "gold_doc_ids": [doc_id]}) + "\n")
    return len(entries), len(picked)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dict_path", type=Path, help="vera.dict.dz (or an uncompressed .dict)")
    parser.add_argument("index_path", type=Path, help="vera.index")
    parser.add_argument("out", type=Path, help="folder for corpus.jsonl and questions.jsonl")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    passages, questions = build(args.dict_path, args.index_path, args.out, args.questions, args.seed)
    print(f"{passages} passages, {questions} questions in {args.out}")


if __name__ == "__main__":
    main()
