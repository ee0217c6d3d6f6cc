"""Which question set a run asked, named for people, and the one rule comparisons follow: runs of one set pair.

A run folder records its question set twice: `fingerprint.json` holds the set's content hash (the whole set, whatever
`dataset.limit`), and `config.yaml` the settings that made it. The name comes from the settings:
- the built-in knowledge base: `demo` and the generator's settings, `demo n_passages=400 n_questions=40 seed=0`;
- own data: the dataset's name, which is the question file's name for `dataset=files` (`qa` for /data/qa.jsonl), and
  the file's name after a slash when the dataset names itself otherwise (`nq/test` for dataset=nq on nq/test.jsonl).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import ReportError
from rollout.identity_keys import HASH_CHARS, question_set_name
from rollout.run_folder import FINGERPRINT_FILE, read_config, read_json

DEMO_SETTINGS = ("n_passages", "n_questions", "seed")
"""The settings the built-in knowledge base's questions are generated from."""


@dataclass(frozen=True, slots=True)
class RunQuestionSet:
    """The question set of one run."""

    name: str
    """What a person calls it: the dataset's name and what made the set (see the module's docstring)."""
    sha256: str | None
    """The set's content hash from fingerprint.json (None for a folder written before fingerprints were)."""

    @property
    def short_hash(self) -> str | None:
        return None if self.sha256 is None else self.sha256[:HASH_CHARS]

    def __str__(self) -> str:
        """`name (hash)`, e.g. `qa (5e6f7a8b)`; the name alone without a hash."""
        return self.name if self.sha256 is None else f"{self.name} ({self.short_hash})"


def run_question_set(run: Path) -> RunQuestionSet | None:
    """The question set `run` asked; None for a folder that says nothing of it (no fingerprint, no dataset config)."""
    digest = ((read_json(Path(run) / FINGERPRINT_FILE) or {}).get("dataset") or {}).get("questions")
    dataset = (read_config(run) or {}).get("dataset")
    if not isinstance(dataset, Mapping):
        dataset = {}
    if not digest and not dataset.get("name"):
        return None
    return RunQuestionSet(_name(dataset), str(digest) if digest else None)


def _name(dataset: Mapping[str, Any]) -> str:
    name = str(dataset.get("name") or "questions")
    if dataset.get("kind") == "demo":
        return " ".join([name, *(f"{key}={dataset[key]}" for key in DEMO_SETTINGS if dataset.get(key) is not None)])
    questions = dataset.get("questions")
    if not isinstance(questions, Mapping) or not (questions.get("path") or questions.get("hf_name")):
        return name
    source = question_set_name(questions.get("path"), hf_name=questions.get("hf_name"),
                               hf_config=questions.get("hf_config"))
    return name if source == name else f"{name}/{source}"


def shared_question_set(sets: Sequence[RunQuestionSet | None]) -> RunQuestionSet | None:
    """The one set every run asked (same name and hash); None when they differ or a run does not say."""
    first = sets[0] if sets else None
    return first if first is not None and all(s == first for s in sets) else None


def question_set_line(shared: RunQuestionSet, questions: Sequence[int]) -> str:
    """`question set: NAME (N questions, hash abc12345)`, N being the distinct questions each run asked (`5 to 40
    questions per run` when the runs asked different numbers of them, e.g. with another `dataset.limit`)."""
    low, high = min(questions, default=0), max(questions, default=0)
    parts = [f"{low} questions" if low == high else f"{low} to {high} questions per run"]
    if shared.sha256 is not None:
        parts.append(f"hash {shared.short_hash}")
    return f"question set: {shared.name} ({', '.join(parts)})"


def check_one_question_set(runs: Sequence[Path], baseline: int, *, allow_different: bool = False) -> None:
    """A `ReportError` naming both sets when a run asked other questions than the baseline (by content hash); paired
    by question id, two question sets would compare unrelated questions that share an id."""
    base = run_question_set(runs[baseline])
    if allow_different or base is None or base.sha256 is None:
        return
    for run in runs:
        other = run_question_set(run)
        if other is not None and other.sha256 is not None and other.sha256 != base.sha256:
            raise ReportError(f"{run} ran question set {other} and {runs[baseline]} ran {base}: "
                              "compare runs of one question set, or pass --allow-different-questions")
