"""A run's identity: every setting that can change its results, so one folder holds one experiment.

`RunIdentity` is what a run folder records (`rollout.run_folder.FINGERPRINT_FILE`) and what a
resumed run must match: the settings as flat dotted config keys (`agent.top_k`,
`retriever.sparse.k1`, `llm.model`, ...) and the hashes of the gateway file, of the tool schemas
the agent was offered and of the dataset's content. Settings that only change how fast or how
visibly a run goes (`dataset.limit`, `workers`, `progress`, `verbose`, timeouts, `output_dir`, `ray.*`, the
gateway's URL and token) are left out, so a larger `dataset.limit` extends a run.

The same rules name the default output folder: `results/<experiment>/<mode>` plus a suffix of the
command-line overrides that are identity keys (`run_suffix`), so a sweep over any axis gives one
folder per job.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rollout.cache_folder import writes_cache
from rollout.data.dataset import PreparedData
from rollout.identity_keys import (
    DEMO_ONLY,
    HASH_CHARS,
    SHARDS_KEY,
    is_identity_key,
    is_under,
    sha256_hex,
    shards_change_results,
)
from rollout.llm.chat_template import load_chat_template
from rollout.run.config import RunConfig
from rollout.run_folder import spec_name


def _canonical(value: Any) -> Any:
    """A JSON value that compares equal for equal settings (paths as text, mappings sorted)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _flatten(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, into)
    else:
        into[prefix] = _canonical(value)


def identity_settings(cfg: RunConfig) -> dict[str, Any]:
    """The run's identity keys and their canonical values, sorted by key."""
    agent = dict(cfg.agent)
    llm = agent.get("llm")
    tree: dict[str, Any] = {
        "mode_name": cfg.mode_name,
        "system_prompt": cfg.system_prompt,
        "agent": agent,
        "retriever": cfg.retriever.to_dict(),
        "dataset": asdict(cfg.dataset),
        "gateway": {"default_top_k": cfg.gateway.default_top_k, "max_top_k": cfg.gateway.max_top_k,
                    "default_max_docs": cfg.gateway.default_max_docs, "offline_steps": cfg.gateway.offline_steps},
        "tokenizer": cfg.tokenizer,
        "repeats": cfg.repeats,
        "seed": cfg.seed,
        "score_failed": cfg.score_failed,
    }
    if not isinstance(llm, Mapping):
        llm = cfg.step_llm()  # the gateway's filter and answer tools may ask the endpoint: its settings decide results
    if isinstance(llm, Mapping):
        tree["llm"] = llm
    flat: dict[str, Any] = {}
    for root, value in tree.items():
        _flatten(root, value, flat)
    if template := agent.get("chat_template"):  # the file's content decides the prompts, not only its path
        flat["agent.chat_template_sha256"] = load_chat_template(str(template)).sha256()
    if cfg.dataset.kind != "demo":
        flat = {k: v for k, v in flat.items() if not is_under(k, DEMO_ONLY)}
    else:  # the generator's settings decide the content; the (empty) file specs do not
        flat = {k: v for k, v in flat.items() if not is_under(k, ("dataset.corpus", "dataset.questions"))}
    uses_llm = isinstance(llm, Mapping)
    keep = {k for k in flat if is_identity_key(k, uses_llm=uses_llm)}
    if shards_change_results(tree["retriever"]["dense"]):
        keep.add(SHARDS_KEY)
    return {k: flat[k] for k in sorted(keep)}


RECORDED_LATER: dict[str, Any] = {
    "gateway.default_max_docs": 10, "dataset.corpus.extensions": [".md", ".txt"], "llm.context_window": None,
    "agent.text_tool_calls": "refuse", "agent.tool_choice": "auto", "agent.tokenizer": None, "agent.answer_tag": None,
    "retriever.sparse.index_path": None, "retriever.sparse.method": "robertson",
    "retriever.dense.pooling": None, "retriever.dense.tevatron_shards": None,
    "dataset.qrels.evidence": None, "dataset.qrels.gold": None, "retriever.dense.passage_tokens": None,
    "retriever.dense.passage_overlap": 0, "retriever.snippet.tokenizer": None, "retriever.snippet.max_tokens": 512,
    SHARDS_KEY: 1,
}
"""Identity keys a run records since they became settings, with the value every run had before: a folder written
then still resumes. The values are history, not today's defaults, so they never follow a change of default."""


@writes_cache
def _file_sha256(path: Path, cache_dir: Path) -> str:
    """sha256 of a file's bytes, remembered in `cache_dir` per (path, size, mtime): a large corpus is read once."""
    path = path.expanduser().resolve()
    st = path.stat()
    stamp = sha256_hex(json.dumps([str(path), st.st_size, st.st_mtime_ns]).encode())[:32]
    memo = Path(cache_dir) / "content-sha256" / stamp
    if memo.is_file():
        return memo.read_text(encoding="utf-8").strip()
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    memo.parent.mkdir(parents=True, exist_ok=True)
    # A temporary name of its own: runs sharing the cache may remember the same file's hash at the same moment.
    fd, tmp = tempfile.mkstemp(prefix=f"{memo.name}.", suffix=".tmp", dir=memo.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(digest.hexdigest())
    Path(tmp).replace(memo)
    return digest.hexdigest()


def dataset_hashes(data: PreparedData, cache_dir: Path) -> dict[str, str]:
    """Content hashes of the corpus file the gateway serves and of the whole question set (not only `dataset.limit`)."""
    # The hash of the questions' canonical JSON lines joined by newlines, fed line by line: a million questions
    # are never held at once, as one string or as records.
    digest = hashlib.sha256()
    for i, q in enumerate(data.questions.whole()):
        digest.update((b"\n" if i else b"") + json.dumps(q.to_json(), sort_keys=True, ensure_ascii=False).encode())
    return {"corpus": _file_sha256(data.corpus_path, cache_dir), "questions": digest.hexdigest()}


def tool_hashes(tool_specs: list[dict[str, Any]]) -> dict[str, str]:
    """Per tool name, the hash of the spec the agent was offered, in canonical JSON."""
    per_tool = {
        spec_name(spec): sha256_hex(json.dumps(spec, sort_keys=True).encode())
        for spec in tool_specs
    }
    return dict(sorted(per_tool.items()))


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """Everything that must be the same for two parts of one run folder to be one experiment."""

    settings: dict[str, Any]
    """Identity config keys (dotted) and their canonical values."""
    gateway_file_sha256: str
    """Hash of the gateway file's bytes."""
    tools: dict[str, str]
    """Per offered tool name, the hash of its spec."""
    dataset: dict[str, str]
    """Content hashes: `corpus` (the served corpus file) and `questions` (the whole question set)."""
    gateway_file: str = ""
    """Path of the gateway file (informational; the hash decides)."""
    overrides: list[str] = field(default_factory=list)
    """The job's command-line overrides that are identity keys (informational: names and labels the run)."""

    @classmethod
    def of(cls, cfg: RunConfig, tool_specs: list[dict[str, Any]], data: PreparedData) -> RunIdentity:
        return cls(
            settings=identity_settings(cfg),
            gateway_file_sha256=sha256_hex(Path(cfg.gateway_config_path).read_bytes()),
            tools=tool_hashes(tool_specs),
            dataset=dataset_hashes(data, cfg.cache_dir),
            gateway_file=str(cfg.gateway_config_path),
            overrides=list(cfg.overrides),
        )

    def compared(self) -> dict[str, Any]:
        """Every compared entry as one flat mapping: settings, then `gateway_file`, `tool.<name>`, `dataset.<part>_sha256`."""
        flat = dict(self.settings)
        flat["gateway_file_sha256"] = self.gateway_file_sha256
        flat.update({f"tool.{name}": h for name, h in self.tools.items()})
        flat.update({f"dataset.{part}_sha256": h for part, h in self.dataset.items()})
        return flat

    def differences(self, earlier: RunIdentity) -> list[str]:
        """`key: old → new` for each entry that changed since `earlier`; empty when none did. An earlier identity
        without a key of `RECORDED_LATER` had that key's value then."""
        old, new = earlier.compared(), self.compared()
        old |= {key: value for key, value in RECORDED_LATER.items() if key in new and key not in old}
        return [
            "{}: {} → {}".format(key, *_show_change(key, old.get(key, _ABSENT), new.get(key, _ABSENT)))
            for key in sorted(old.keys() | new.keys())
            if old.get(key, _ABSENT) != new.get(key, _ABSENT)
        ]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunIdentity:
        return cls(**data)


_ABSENT = object()


def _show(key: str, value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if key.startswith("tool.") or key.endswith("sha256"):
        return str(value)[:12]
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:48] + f"… ({sha256_hex(text.encode())[:HASH_CHARS]})"


_SHOWN_CHARS = 60
_BEFORE_CHANGE = 24


def _show_change(key: str, old: Any, new: Any) -> tuple[str, str]:
    """Both values as `_show` has them; two long texts (a system prompt) from the word before where they part,
    so that the words that changed are seen, not a beginning they share."""
    hashes = key.startswith("tool.") or key.endswith("sha256")
    if hashes or not (isinstance(old, str) and isinstance(new, str)) or max(len(old), len(new)) <= _SHOWN_CHARS:
        return _show(key, old), _show(key, new)
    same = os.path.commonprefix([old, new])
    cut = max(0, len(same) - _BEFORE_CHANGE)
    space = same.rfind(" ", max(0, cut - 16), cut)  # at a word's start when one is near
    start = space + 1 if space >= 0 else cut

    def window(text: str) -> str:
        part = json.dumps(text[start:start + _SHOWN_CHARS], ensure_ascii=False)[1:-1]
        return f'"{"…" if start else ""}{part}{"…" if start + _SHOWN_CHARS < len(text) else ""}"'

    return window(old), window(new)


