"""A run's dataset: the `dataset` config group made typed, and turned into corpus + questions."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rollout.data import CorpusSpec, DemoKB, QuestionSpec, ensure_demo_kb, load_question_spec, materialize_corpus
from rollout.errors import ConfigError
from rollout.paths import PROJECT_ROOT
from rollout.records import Question


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """Where the corpus and questions come from (`conf/dataset/*.yaml`)."""

    name: str
    """Experiment name used in the default output folder."""
    kind: str
    """`demo` (generated knowledge base) or `files` (your corpus and questions)."""
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    questions: QuestionSpec = field(default_factory=QuestionSpec)
    limit: int | None = None
    """Run only the first N questions."""
    n_passages: int = 2000
    """Demo knowledge base size."""
    n_questions: int = 200
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetConfig:
        d = dict(d)
        try:
            corpus = CorpusSpec(**_with_project_path(d.pop("corpus", None) or {}))
            questions = QuestionSpec(**_with_project_path(d.pop("questions", None) or {}))
            return cls(corpus=corpus, questions=questions, **d)
        except TypeError as e:
            raise ConfigError(f"unexpected dataset setting: {e}. Compare with conf/dataset/files.yaml") from e


def _with_project_path(section: dict[str, Any]) -> dict[str, Any]:
    section = dict(section)
    if section.get("path"):
        p = Path(section["path"]).expanduser()
        # Paths in shipped configs are relative to the project; the user's may be to their cwd.
        if not p.is_absolute() and not p.exists() and (PROJECT_ROOT / p).exists():
            p = PROJECT_ROOT / p
        section["path"] = str(p)
    return section


@dataclass(frozen=True, slots=True)
class PreparedData:
    """The corpus file the gateway serves and the questions the workers answer."""

    corpus_path: Path
    """A FlashRAG jsonl (materialized once when the source is another format)."""
    questions: list[Question]


def prepare_data(ds: DatasetConfig, cache_dir: Path) -> PreparedData:
    """Generate or read the corpus and questions; bad files raise `DataError` naming the fix."""
    if ds.kind == "demo":
        kb: DemoKB = ensure_demo_kb(cache_dir, n_passages=ds.n_passages, n_questions=ds.n_questions, seed=ds.seed)
        corpus = replace(ds.corpus, path=str(kb.corpus_path), hf_name=None)
        questions = replace(ds.questions, path=str(kb.questions_path), hf_name=None)
    elif ds.kind == "files":
        corpus, questions = ds.corpus, ds.questions
    else:
        raise ConfigError(f"unknown dataset kind {ds.kind!r}: use kind: demo or kind: files (see conf/dataset/)")
    return PreparedData(materialize_corpus(corpus, cache_dir), load_question_spec(questions, limit=ds.limit))
