"""A model's chat template, read from its tokenizer files and rendered as `transformers` renders it.

An agent that posts to `/completions` builds the prompt itself: the template of the model's own tokenizer
(`tokenizer_config.json`'s `chat_template`, or a `chat_template.jinja` beside it, a `.jinja` file, or the
`tokenizer.chat_template` of a GGUF model file, as llama.cpp serves it, read from the file's header) rendered
with jinja2 the way `transformers`' `apply_chat_template` does — a sandboxed environment with `trim_blocks`
and `lstrip_blocks`, the `loopcontrols` extension, its `tojson` filter and its `raise_exception` and
`strftime_now` helpers, and the tokenizer's special tokens (`bos_token`, `eos_token`, ...) as variables — so
no `transformers`, weights or vocabulary are needed. Templates that use `transformers`' own `{% generation %}`
tag (for assistant masks) are refused with a `ConfigError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rollout.errors import ConfigError
from rollout.llm.gguf_header import GGUFFormatError, read_gguf_metadata

TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
"""Where recent `transformers` versions save the template, beside tokenizer_config.json."""
GGUF_TEMPLATE = "tokenizer.chat_template"
"""The GGUF metadata key of a model's (default) chat template."""
GGUF_TOKENS = "tokenizer.ggml.tokens"
GGUF_TOKEN_IDS = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
                  "unk_token": "tokenizer.ggml.unknown_token_id", "sep_token": "tokenizer.ggml.seperator_token_id",
                  "pad_token": "tokenizer.ggml.padding_token_id", "mask_token": "tokenizer.ggml.mask_token_id"}
"""The GGUF keys holding the id of each special token (`seperator` is GGUF's spelling); the text is the id's entry in
`tokenizer.ggml.tokens`."""
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A chat template's source, the special tokens it may read, and where it came from."""

    source: str
    tokens: dict[str, str] = field(default_factory=dict)
    origin: str = ""
    """The file the template was read from (for error messages)."""

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The prompt text of `messages` (what `apply_chat_template(..., tokenize=False)` returns)."""
        try:
            return _compile(self.source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                tools=None, documents=None, **self.tokens)
        except jinja2.TemplateError as e:
            raise ConfigError(f"the chat template of {self.origin} (agent.chat_template) failed to render: {e}") from e

    def sha256(self) -> str:
        """A hash of what decides the rendering: the template and the special tokens."""
        data = json.dumps({"template": self.source, "tokens": self.tokens}, sort_keys=True)
        return hashlib.sha256(data.encode()).hexdigest()


def load_chat_template(path: str | Path) -> ChatTemplate:
    """The template at `path`: a tokenizer folder or its tokenizer_config.json, a `.jinja` file, or a `.gguf` model.

    A folder's `chat_template.jinja` wins over tokenizer_config.json's `chat_template` (as in `transformers`); a
    list of named templates gives the one named `default`. Any failure is a `ConfigError` naming the file."""
    p = Path(path).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        template = _from_gguf(p)
    elif p.is_dir():
        template = _from_tokenizer_files(path, p / TOKENIZER_CONFIG, p / TEMPLATE_FILE)
    elif p.is_file() and p.suffix == ".jinja":
        template = _from_tokenizer_files(path, p.with_name(TOKENIZER_CONFIG), p)
    elif p.is_file():
        template = _from_tokenizer_files(path, p, None)
    else:
        raise ConfigError(f"agent.chat_template={str(path)!r} does not exist: point it at the model's tokenizer "
                          f"folder (with {TOKENIZER_CONFIG}), its {TOKENIZER_CONFIG}, a .jinja file or a .gguf model")
    try:
        _compile(template.source)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"the chat template of {template.origin} (agent.chat_template) is not valid jinja: "
                          f"{e}") from e
    return template


def _from_tokenizer_files(path: str | Path, config_file: Path, jinja_file: Path | None) -> ChatTemplate:
    """The template of `jinja_file` (when it exists) or `config_file`'s `chat_template`, with `config_file`'s
    special tokens."""
    if not config_file.is_file() and not (jinja_file is not None and jinja_file.is_file()):
        raise ConfigError(f"agent.chat_template={str(path)!r} holds neither {TOKENIZER_CONFIG} nor {TEMPLATE_FILE}: "
                          "point it at the model's tokenizer folder")
    config = _read_config(config_file) if config_file.is_file() else {}
    if jinja_file is not None and jinja_file.is_file():
        source, origin = jinja_file.read_text(encoding="utf-8"), str(jinja_file)
    else:
        source, origin = _template_in(config, config_file), str(config_file)
    tokens = {name: text for name in SPECIAL_TOKENS if (text := _token_text(config.get(name))) is not None}
    return ChatTemplate(source, tokens, origin)


def _from_gguf(path: Path) -> ChatTemplate:
    """The `tokenizer.chat_template` of a GGUF model file and its special tokens' texts, read from its header."""
    try:
        metadata = read_gguf_metadata(path, arrays={GGUF_TOKENS})
    except (OSError, GGUFFormatError) as e:
        raise ConfigError(f"agent.chat_template: cannot read {path} as a GGUF file: {e}") from e
    source = metadata.get(GGUF_TEMPLATE)
    if not isinstance(source, str) or not source:
        raise ConfigError(f"agent.chat_template: {path} holds no {GGUF_TEMPLATE} (a base model's file?): point it at "
                          "the tokenizer files of a chat model, or a .jinja file")
    vocabulary = metadata.get(GGUF_TOKENS) or []
    tokens = {name: vocabulary[i] for name, key in GGUF_TOKEN_IDS.items()
              if isinstance(i := metadata.get(key), int) and 0 <= i < len(vocabulary)}
    return ChatTemplate(source, tokens, str(path))


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"agent.chat_template: cannot read {path}: {e}") from e
    if not isinstance(config, dict):
        raise ConfigError(f"agent.chat_template: {path} is not a JSON object")
    return config


def _template_in(config: dict[str, Any], path: Path) -> str:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if not isinstance(template, str) or not template:
        raise ConfigError(f"agent.chat_template: {path} holds no chat_template (nor a {TEMPLATE_FILE} beside it): "
                          "point it at the tokenizer files of a chat model, or a .jinja file")
    return template


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json stores it: a string, or an AddedToken dict with `content`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # jinja's own tojson escapes HTML characters; templates expect plain JSON.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    """The compiled template, once per source per process (a worker renders one template for every task)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)
