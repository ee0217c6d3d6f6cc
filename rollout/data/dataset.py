"""A run's dataset: the `dataset` config group made typed, and turned into corpus + questions."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import islice
from pathlib import Path
from typing import Any, overload

from omegaconf import DictConfig, OmegaConf

from rollout.data import CorpusSpec, DemoKB, QuestionSpec, ensure_demo_kb, materialize_corpus, open_corpus
from rollout.data.browsecomp_plus import (
    Qrels,
    QrelsSpec,
    check_corpus_spec,
    read_offline,
    read_qrels_spec,
    warn_unknown_docids,
)
from rollout.data.loaders import count_question_spec, iter_question_spec
from rollout.errors import ConfigError
from rollout.identity_keys import question_set_name
from rollout.paths import CONF_DIR, PROJECT_ROOT
from rollout.records import Question


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """Where the corpus and questions come from (`conf/dataset/*.yaml`)."""

    name: str
    """Experiment name used in the default output folder."""
    kind: str
    """`demo` (generated knowledge base), `files` (your corpus and questions) or `browsecomp_plus` (its corpus,
    queries and qrels, `rollout.data.browsecomp_plus`)."""
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    questions: QuestionSpec = field(default_factory=QuestionSpec)
    qrels: QrelsSpec = field(default_factory=QrelsSpec)
    """BrowseComp-Plus' two judgment files (kind `browsecomp_plus` only)."""
    limit: int | None = None
    """Run only the first N questions."""
    n_passages: int = 2000
    """Demo knowledge base size."""
    n_questions: int = 200
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetConfig:
        """The typed dataset; a setting its kind does not read is a `ConfigError` (`check_dataset_keys`)."""
        check_dataset_keys(d)
        d = dict(d)
        try:
            corpus = CorpusSpec(**_with_project_path(d.pop("corpus", None) or {}))
            questions = QuestionSpec(**_with_project_path(d.pop("questions", None) or {}))
            qrels = QrelsSpec(**_with_project_path(d.pop("qrels", None) or {}, keys=("evidence", "gold")))
            return cls(corpus=corpus, questions=questions, qrels=qrels, **d)
        except TypeError as e:
            raise ConfigError(f"unexpected dataset setting: {e}. Compare with conf/dataset/files.yaml") from e


READ_BY_KIND = {
    "demo": ("name", "kind", "limit", "n_passages", "n_questions", "seed"),
    "files": ("name", "kind", "limit", "corpus", "questions"),
    "browsecomp_plus": ("name", "kind", "limit", "corpus", "questions", "qrels"),
}
"""The `dataset.*` settings each kind reads: the generator's, or the corpus and question sources."""


def check_dataset_keys(d: Mapping[str, Any]) -> None:
    """A `ConfigError` naming the fix when `d` (the `dataset` config) sets something its kind would not read.

    Nothing is accepted and ignored: `+dataset.corpus.path=...` on the built-in knowledge base would otherwise run
    the demo and name the folder after a path that was never read."""
    kind = d.get("kind")
    read = READ_BY_KIND.get(kind) if isinstance(kind, str) else None
    if read is None:
        raise ConfigError(f"unknown dataset kind {kind!r}: use kind: demo, files or browsecomp_plus "
                          "(see conf/dataset/)")
    unread = {key: leaves for key in d if key not in read and (leaves := _leaves(key, d[key]))}
    if not unread:
        _check_source_keys(d)
        return
    keys = ", ".join(next(iter(unread.values())))
    reads = ", ".join(f"dataset.{k}" + (".*" if k in SOURCE_SPECS else "") for k in read[2:])
    if kind == "demo":
        fix = ("for your own corpus and questions choose dataset=files: python -m rollout dataset=files "
               "dataset.corpus.path=<folder or file> dataset.questions.path=<file>"
               if {"corpus", "questions"} & set(unread) else "remove it")
        raise ConfigError(f"{keys} is not read by the built-in knowledge base (dataset=demo, which reads {reads}), "
                          f"so it would change nothing; {fix}")
    what = "BrowseComp-Plus" if kind == "browsecomp_plus" else "a dataset of files"
    raise ConfigError(f"{keys} is not read by {what} (kind: {kind}, which reads {reads}), so it would "
                      "change nothing; remove it (the built-in knowledge base, dataset=demo, has n_passages, "
                      "n_questions and seed; only dataset=browsecomp_plus has qrels)")


SOURCE_SPECS = {"corpus": CorpusSpec, "questions": QuestionSpec, "qrels": QrelsSpec}
"""The spec each source section of a dataset of files is read into."""
SOURCE_CONFIGS = {"corpus": "files.yaml", "questions": "files.yaml", "qrels": "browsecomp_plus.yaml"}
"""The dataset config that lists each section's keys."""


def _check_source_keys(d: Mapping[str, Any]) -> None:
    """A `ConfigError` naming the key and the valid ones when `dataset.corpus` or `dataset.questions` sets a key its
    spec does not have (`+dataset.corpus.colums.text=body`), rather than the spec's own TypeError."""
    for section, spec in SOURCE_SPECS.items():
        block = d.get(section)
        if not isinstance(block, Mapping):
            continue
        valid = [f.name for f in fields(spec)]
        for key, value in block.items():
            if key in valid or value is None:
                continue
            close = difflib.get_close_matches(str(key), valid, n=1)
            fix = f"did you mean dataset.{section}.{close[0]}? Set that instead" if close else "remove it"
            raise ConfigError(f"dataset.{section}.{key} is not a {section} setting, so nothing would read it; {fix} "
                              f"(dataset.{section} reads {', '.join(valid)}; conf/dataset/{SOURCE_CONFIGS[section]} lists each)")


def dataset_preset(choice: str) -> DictConfig:
    """conf/dataset/CHOICE.yaml as Hydra composes it: the files its `defaults` include (`base/NAME@_here_`, what the
    FlashRAG question sets share), then its own keys."""
    own = OmegaConf.load(CONF_DIR / "dataset" / f"{choice}.yaml")
    included = [OmegaConf.load(CONF_DIR / "dataset" / f"{str(entry).removesuffix('@_here_')}.yaml")
                for entry in own.pop("defaults", []) if entry != "_self_"]
    merged = OmegaConf.merge(*included, own)
    assert isinstance(merged, DictConfig)
    return merged


def unread_dataset_override(args: Sequence[str]) -> str | None:
    """Why a `dataset.<key>=value` override in `args` (without `+`) names a setting the chosen dataset does not read,
    as `check_dataset_keys` says it; None when none does. Hydra would refuse it first, suggesting `+dataset.<key>`,
    which then runs the chosen dataset without the setting (and is refused by `check_dataset_keys`)."""
    overrides = [a.partition("=") for a in args if "=" in a and not a.startswith("-")]
    choices = [value for key, _, value in overrides if key.lstrip("+") == "dataset"]
    choice = choices[-1] if choices else _default_dataset()
    if choice is None or "," in choice or not (CONF_DIR / "dataset" / f"{choice}.yaml").is_file():
        return None  # a sweep over datasets, or a name Hydra itself reports
    dataset = dataset_preset(choice)
    absent = object()
    for key, _, value in overrides:
        path = key.removeprefix("dataset.")
        if path == key or OmegaConf.select(dataset, path, default=absent) is not absent:
            continue  # not a dataset setting (a `+` or `~` one included), or one the config has
        extended = OmegaConf.create(OmegaConf.to_container(dataset))
        OmegaConf.update(extended, path, value, force_add=True)
        try:
            check_dataset_keys(OmegaConf.to_container(extended))
        except ConfigError as e:
            return str(e)
    return None


def _default_dataset() -> str | None:
    for entry in OmegaConf.load(CONF_DIR / "config.yaml").get("defaults", []):
        if isinstance(entry, Mapping) and "dataset" in entry:
            return str(entry["dataset"])
    return None


def _leaves(key: str, value: Any) -> list[str]:
    """`dataset.<key>`, or the settings under it when it is a section (`dataset.corpus.path`); a null one sets
    nothing and is left out (`rollout export` adds `dataset.corpus.path=null` to any dataset)."""
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)]
    return [] if value is None else [f"dataset.{key}"]


def _with_project_path(section: dict[str, Any], keys: tuple[str, ...] = ("path",)) -> dict[str, Any]:
    section = dict(section)
    for key in keys:
        if section.get(key):
            p = Path(section[key]).expanduser()
            # Paths in shipped configs are relative to the project; the user's may be to their cwd.
            if not p.is_absolute() and not p.exists() and (PROJECT_ROOT / p).exists():
                p = PROJECT_ROOT / p
            section[key] = str(p)
    return section


class QuestionSet(Sequence[Question]):
    """The questions of a run, read from their source on each pass and never held all at once.

    A run of a million questions would otherwise keep a million `Question`s (about 1 KB each) for its
    whole length. Constructing one reads the source once: it counts the questions and checks their ids
    (`count_question_spec`), and logs the lines it skips once (unless `warn` is False). Iterating reads it
    again; indexing reads up to the index. With `qrels` (BrowseComp-Plus), each question comes with its judged
    documents in its metadata (`Qrels.annotate`).
    """

    def __init__(self, spec: QuestionSpec, limit: int | None = None, *, warn: bool = True,
                 qrels: Qrels | None = None):
        self.spec = spec
        self.limit = limit
        self.qrels = qrels
        self._count = count_question_spec(spec, limit=limit, warn=warn)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Question]:
        questions = iter_question_spec(self.spec, limit=self.limit)
        return questions if self.qrels is None else map(self.qrels.annotate, questions)

    @overload
    def __getitem__(self, index: int) -> Question: ...

    @overload
    def __getitem__(self, index: slice) -> list[Question]: ...

    def __getitem__(self, index: int | slice) -> Question | list[Question]:
        if isinstance(index, slice):
            return list(self)[index]
        position = index + self._count if index < 0 else index
        if not 0 <= position < self._count:
            raise IndexError(f"question {index} of a set of {self._count}")
        return next(islice(iter(self), position, None))

    def whole(self) -> QuestionSet:
        """Every question of the source, whatever the limit."""
        # This set's count warned.
        return self if self.limit is None else QuestionSet(self.spec, warn=False, qrels=self.qrels)


@dataclass(frozen=True, slots=True)
class PreparedData:
    """The corpus file the gateway serves and the questions the workers answer."""

    corpus_path: Path
    """A FlashRAG jsonl (materialized once when the source is another format)."""
    questions: QuestionSet


def data_sources(ds: DatasetConfig, cache_dir: Path) -> tuple[CorpusSpec, QuestionSpec]:
    """Where the corpus and the questions are read from: the files the config names, or the demo knowledge base
    (generated once into `cache_dir`)."""
    if ds.kind == "demo":
        kb: DemoKB = ensure_demo_kb(cache_dir, n_passages=ds.n_passages, n_questions=ds.n_questions, seed=ds.seed)
        return (replace(ds.corpus, path=str(kb.corpus_path), hf_name=None),
                replace(ds.questions, path=str(kb.questions_path), hf_name=None))
    if ds.kind in ("files", "browsecomp_plus"):
        return ds.corpus, ds.questions
    raise ConfigError(f"unknown dataset kind {ds.kind!r}: use kind: demo, files or browsecomp_plus "
                      "(see conf/dataset/)")


def prepare_data(ds: DatasetConfig, cache_dir: Path) -> PreparedData:
    """Generate or read the corpus and questions; bad files raise `DataError` naming the fix."""
    if ds.kind == "browsecomp_plus":
        return prepare_browsecomp_plus(ds, cache_dir)
    corpus, questions = data_sources(ds, cache_dir)
    return PreparedData(materialize_corpus(corpus, cache_dir), QuestionSet(questions, ds.limit))


def prepare_browsecomp_plus(ds: DatasetConfig, cache_dir: Path) -> PreparedData:
    """BrowseComp-Plus' corpus (read offline when it is the Hugging Face dataset), its queries with their qrels.

    The corpus store is written here, before the gateway that serves it starts (which then maps it): the judged
    docids are looked up in it, and one the corpus lacks is a counted warning (`warn_unknown_docids`)."""
    check_corpus_spec(ds.corpus)
    qrels = read_qrels_spec(ds.qrels)  # a missing judgment file fails before the corpus is read
    corpus_path = read_offline(lambda: materialize_corpus(ds.corpus, cache_dir), ds.corpus)
    store = open_corpus(corpus_path, cache_dir)
    warn_unknown_docids(qrels, lambda ids: (store.rows_of(ids) >= 0).tolist(), ds.corpus.source)
    return PreparedData(corpus_path, QuestionSet(ds.questions, ds.limit, qrels=qrels))


def _question_set_resolver(*, _parent_: DictConfig) -> str:
    """`${question_set:}`, the `name:` of conf/dataset/files.yaml: the run's question file names its experiment."""
    questions = _parent_.get("questions") or {}

    def value(key: str) -> str | None:
        found = OmegaConf.select(questions, key, default=None, throw_on_missing=False) if questions else None
        return None if found in (None, "???") else str(found)

    return question_set_name(value("path"), hf_name=value("hf_name"), hf_config=value("hf_config"))


OmegaConf.register_new_resolver("question_set", _question_set_resolver, replace=True)
