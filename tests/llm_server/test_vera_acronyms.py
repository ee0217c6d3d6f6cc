"""`python -m bench.vera_acronyms`, the public question set of docs/agents.md's experiment with a real model, on a
dictionary written here in dictd's format (offsets in its base 64, entries of one headword apart): every entry a
passage, questions only about acronyms with one plain-worded entry, each naming its passage as gold, and a
`dataset=files` run reads both files."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

from bench.vera_acronyms import _B64
from rollout.data.dataset import prepare_data
from rollout.data.loaders import load_questions
from rollout.paths import PROJECT_ROOT
from rollout.run.config import compose_run_config


def b64(n: int) -> str:
    digits = ""
    while True:
        digits = _B64[n % 64] + digits
        n //= 64
        if n == 0:
            return digits


ENTRIES = [
    ("00-database-short", "     V.E.R.A. -- Virtual Entity of Relevant Acronyms\n"),
    ("ACE", "       Advanced Computing Environment (org., Compaq, MS)\n"),
    ("ACE", "       Access Control Entry (MS, Windows)\n"),
    ("KERMIT", "       Kl-10 Error-free Reciprocal Micro Interconnect over Tty lines\n"),
    ("4GT", "       4 GB [RAM] Tuning (RAM, GB)\n"),
    ("ZVOL", "       ZFS VOLume (ZFS, Solaris)\n"),
    ("3DDDI", "       3D Device Dependent Interface (MS), \"3D DDI\"\n"),
    ("BFS", "       \"Big\" File System (FS)\n"),
    ("AT", "       Attention (Hayes)\n"),
]


def write_dictionary(folder):
    text, index = b"", []
    for head, body in ENTRIES:
        entry = f"{head}\n{body}       \n".encode()
        index.append(f"{head.lower()}\t{b64(len(text))}\t{b64(len(entry))}")
        text += entry
    (folder / "vera.dict").write_bytes(text)
    (folder / "vera.index").write_text("\n".join(index) + "\n")


def documented_command() -> list[str]:
    """The command line docs/agents.md shows (one, in a fenced block), as the shell splits it."""
    page = (PROJECT_ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in page.splitlines() if line.strip().startswith("python -m bench.vera_acronyms")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_the_documented_command_writes_a_corpus_and_questions_a_files_run_reads(tmp_path):
    words = documented_command()
    assert words[:3] == ["python", "-m", "bench.vera_acronyms"] and len(words) == 6
    assert words[3].endswith("vera.dict.dz") and words[4].endswith("vera.index")  # what dict-vera installs
    write_dictionary(tmp_path)
    out = tmp_path / words[5]
    done = subprocess.run([sys.executable, *words[1:3], str(tmp_path / "vera.dict"), str(tmp_path / "vera.index"),
                           str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"8 passages, 3 questions in {out}"
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [p["contents"].split("\n")[0] for p in corpus] == [head for head, _ in ENTRIES[1:]]
    assert corpus[1]["contents"] == "ACE\nACE: Access Control Entry (MS, Windows)"
    questions = {q["question"]: q for q in map(json.loads, (out / "questions.jsonl").read_text().splitlines())}
    # ACE has two entries, 4GT's and BFS's expansions use VERA's bracket and quote notation, AT's is one word: no
    # question asks them. 3DDDI's quoted spelling follows its topics.
    assert set(questions) == {f"What does the acronym {a} stand for?" for a in ("KERMIT", "ZVOL", "3DDDI")}
    zvol = questions["What does the acronym ZVOL stand for?"]
    assert zvol["golden_answers"] == ["ZFS VOLume"] and zvol["gold_doc_ids"] == [corpus[4]["id"]]

    cfg = compose_run_config("dataset=files", f"dataset.corpus.path={out / 'corpus.jsonl'}",
                             f"dataset.questions.path={out / 'questions.jsonl'}")
    prepared = prepare_data(cfg.dataset, tmp_path / "cache")
    assert prepared.corpus_path == out / "corpus.jsonl"
    loaded = load_questions(out / "questions.jsonl")
    assert [q.golden_answers for q in loaded] == [q["golden_answers"] for q in questions.values()]
