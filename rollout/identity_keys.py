"""Which config keys are part of a run's identity, and how the overrides among them name its folder.

`rollout.run.identity` uses these rules to fingerprint a run; `rollout.run.config` uses them to name
the default output folder (`results/<experiment>/<mode>` plus `,key=value` per identity override; in a sweep,
per identity override of a key it varies: `rollout.run.sweep_folders`), so a sweep over any axis gives one folder
per job. An own-data run's experiment is its question set
(`question_set_name`): runs over different question files never share `results/<experiment>`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

IDENTITY_ROOTS = (
    "mode_name", "gateway_config_path", "prompt", "system_prompt", "agent", "llm", "retriever", "dataset",
    "gateway.default_top_k", "gateway.max_top_k", "gateway.default_max_docs", "gateway.offline_steps", "repeats",
    "seed", "score_failed", "tokenizer",
)
"""Config keys (and everything under them) that can change a result; `prompt` is the choice of conf/prompt/ (what
it changes, the `system_prompt`, is in the identity: the choice only names the folder)."""

NOT_IDENTITY = (
    "dataset.name", "dataset.limit", "dataset.questions.skip_bad_lines", "retriever.kind",
    "retriever.dense.batch_size", "retriever.dense.max_query_batch", "retriever.dense.batch_wait_ms",
    "retriever.dense.shards", "retriever.dense.serve", "retriever.dense.serve_replicas", "retriever.dense.serve_cpus",
    "retriever.dense.serve_timeout_s",
    "retriever.sparse.build_memory_mb", "retriever.sparse.pruning", "llm.api_key_env", "llm.timeout_s", "llm.max_retries", "llm.prices",
    "agent.llm", "agent.backoff_base_s", "agent.backoff_max_s", "agent.retry_after_max_s",
)
"""Keys under an identity root that change only speed, cost accounting or retries, or that name the run
(`dataset.questions.skip_bad_lines` changes which questions there are, and the questions' hash records that)."""

SHARDS_KEY = "retriever.dense.shards"
"""A serving layout for a flat index (its shards answer exactly as the whole index), so left out of the identity
there; an HNSW or IVF index is built per shard, whose approximation changes with the count: part of it then."""


def shards_change_results(dense: object) -> bool:
    """Whether `retriever.dense.shards` can change results: for a `retriever.dense` section of another index
    kind than flat."""
    get = getattr(dense, "get", None)
    return get is not None and get("index", "flat") != "flat"


_IN_PATH_ALREADY = ("mode", "mode_name", "dataset", "experiment", "retriever")
"""Overrides the default folder already shows (`mode`, `dataset` via the experiment) or that select only
options the identity leaves out (`retriever=` sets `retriever.kind`)."""

DEMO_ONLY = ("dataset.n_passages", "dataset.n_questions", "dataset.seed")
"""Settings of the generated knowledge base; a file dataset ignores them."""

_MAX_VALUE_CHARS = 24
_MAX_SUFFIX_CHARS = 160
HASH_CHARS = 8


def is_under(key: str, roots: Iterable[str]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in roots)


def is_identity_key(key: str, *, uses_llm: bool) -> bool:
    """Whether the dotted config `key` is part of a run's identity (`llm.*` only for an agent that uses the LLM)."""
    if not is_under(key, IDENTITY_ROOTS) or is_under(key, NOT_IDENTITY):
        return False
    return uses_llm or not is_under(key, ("llm",))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _short_value(value: str) -> str:
    """A filesystem-safe, readable rendering of an override's value; long ones end in a hash of the whole."""
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "_", value).strip("_") or "_"
    if len(safe) > _MAX_VALUE_CHARS:
        safe = f"{safe[:_MAX_VALUE_CHARS - HASH_CHARS - 1]}-{sha256_hex(value.encode())[:HASH_CHARS]}"
    return safe


_DATA_SUFFIXES = (".gz", ".bz2", ".zst", ".jsonl", ".json", ".parquet", ".csv")
"""Endings a question file's name loses when it names the experiment (`qa.jsonl.gz` is `qa`)."""


def question_set_name(path: str | None, *, hf_name: str | None = None, hf_config: str | None = None) -> str:
    """The experiment an own-data run is filed under: its question file's (or folder's) name without its
    endings, else the Hugging Face dataset's name and config, else `custom`; folder-safe."""
    if path:
        name = Path(str(path)).name
        while (suffix := Path(name).suffix.lower()) in _DATA_SUFFIXES and Path(name).stem:
            name = name[: -len(suffix)]
    elif hf_name:
        name = "-".join(str(part) for part in (str(hf_name).rstrip("/").rsplit("/", 1)[-1], hf_config) if part)
    else:
        name = "custom"
    return _short_value(name)


def identity_overrides(overrides: Iterable[str], *, uses_llm: bool, shards_count: bool = False) -> list[str]:
    """The overrides (`key=value`, in the given order) that change the run's identity, as folder-safe parts;
    `retriever.dense.shards` among them with `shards_count` (`shards_change_results`)."""
    parts = []
    for override in overrides:
        key, sep, value = str(override).partition("=")
        key = key.lstrip("+~")
        if not sep or key in _IN_PATH_ALREADY:
            continue
        if is_identity_key(key, uses_llm=uses_llm) or (shards_count and key == SHARDS_KEY):
            parts.append(f"{key}={_short_value(value)}")
    return parts


def run_suffix(parts: list[str]) -> str:
    """`,part,part` appended to the mode in the default output folder; empty without parts."""
    suffix = "".join("," + p for p in parts)
    if len(suffix) > _MAX_SUFFIX_CHARS:  # a folder name must stay under the filesystem's 255 bytes
        suffix = suffix[:_MAX_SUFFIX_CHARS - HASH_CHARS - 1] + "-" + sha256_hex(suffix.encode())[:HASH_CHARS]
    return suffix
