"""Counting and cutting text in model tokens: the one tokenizer the gateway's budgets and context counts share.

`tokenizer=` names it: null is the bundled encoder's (all-MiniLM-L6-v2's WordPiece, no download); a folder
holding `tokenizer.json` or such a file itself (for example a local copy of the LLM's); or a Hugging Face
model name, read from the local cache (or downloaded when the machine may). The `tokenizers` library reads
them all, without torch. Special tokens are not counted: a count is of the text itself.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollout.errors import RetrievalError

TOKENIZER_FILE = "tokenizer.json"


_ASCII_SPACE = re.compile(r"[ \t\n\r]+")
"""Where a BERT-style tokenizer always splits (its normalizer makes \t, \n and \r spaces; its pre-tokenizer
splits at spaces), so no token spans it."""
_WORD_CACHE_SIZE = 200_000
_BY_WORD = ("BertPreTokenizer", "WhitespaceSplit", "Whitespace")
"""Pre-tokenizers that split at every space, so a text's count is the sum of its words' counts."""
_CONTEXT_FREE = ("BertNormalizer", "NoneType")
"""Normalizers that map each character on its own, never across a space (lowercase, accents, control chars)."""


class TokenCounter:
    """Counts and cuts text in the tokens of one tokenizer."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        # `encode_batch_fast` (tokenizers >= 0.20) skips the offsets; older versions only have `encode_batch`.
        self._encode_fast = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self.name = name
        """What `tokenizer=` named (`bundled:all-MiniLM-L6-v2` for the default)."""
        # Every tool result is counted, and results repeat the same passages' words: for a tokenizer whose
        # count adds up word by word (BERT's WordPiece, the default), counting each distinct word once makes
        # a result's count a few dictionary lookups. The count is the same; other tokenizers encode the text.
        self._by_word = (type(tokenizer.pre_tokenizer).__name__ in _BY_WORD
                         and type(tokenizer.normalizer).__name__ in _CONTEXT_FREE)
        self._words: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Tokens of `text` (0 for an empty text)."""
        if not text:
            return 0
        if self._by_word:
            return self._count_by_word(text)
        return self.count_batch([text])[0]

    def _count_by_word(self, text: str) -> int:
        words = _ASCII_SPACE.split(text)
        known = self._words
        counts: dict[str, int] = {}
        missing = []
        for word in set(words):
            n = known.get(word)
            if n is None:
                missing.append(word)
            else:
                counts[word] = n
        if missing:
            fresh = dict(zip(missing, self.count_batch(missing), strict=True))
            counts.update(fresh)
            with self._lock:  # tool calls are counted on several threads; a full cache starts over
                if len(known) + len(fresh) > _WORD_CACHE_SIZE:
                    known.clear()
                known.update(fresh)
        return sum(counts[w] for w in words)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """`count` of each text, encoded in one batch (without character offsets, which counting does not need:
        a fifth faster)."""
        if not texts:
            return []
        return [len(e.ids) for e in self._encode_fast(list(texts), add_special_tokens=False)]

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut where a token ends, that counts at most `max_tokens` tokens.

        The cut keeps the whitespace its last token ends with (a byte-level BPE's run of spaces or newlines is a
        token): BrowseComp-Plus' search snippet is its first 512 tokens decoded, whitespace and all."""
        if max_tokens <= 0 or not text:
            return ""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= max_tokens:
            return text
        # A word-piece cut can re-tokenize differently ("playing" cut after "play"); step back until it fits.
        for end in range(max_tokens, 0, -1):
            cut = text[: encoding.offsets[end - 1][1]]
            if self.count(cut) <= max_tokens:
                return cut
        return ""


def load_token_counter(name_or_path: str | None = None) -> TokenCounter:
    """The counter `tokenizer=` names (see the module docstring); a `RetrievalError` says how to fix a bad name."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise RetrievalError(f"counting tokens needs the tokenizers package ({e}): pip install tokenizers") from e
    if name_or_path is None:
        from rollout.paths import bundled_model_path

        return TokenCounter(Tokenizer.from_file(str(Path(bundled_model_path()) / TOKENIZER_FILE)),
                            "bundled:all-MiniLM-L6-v2")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / TOKENIZER_FILE
        if not path.is_file():
            raise RetrievalError(f"tokenizer={name_or_path}: the folder has no {TOKENIZER_FILE}. Name a folder "
                                 f"holding a fast tokenizer's {TOKENIZER_FILE}, the file itself, or a Hugging Face name")
    if path.is_file():
        try:
            return TokenCounter(Tokenizer.from_file(str(path)), str(name_or_path))
        except Exception as e:  # the library raises a bare Exception for a file it cannot read
            raise RetrievalError(f"tokenizer={name_or_path}: not a tokenizers file ({e})") from e
    try:
        return TokenCounter(Tokenizer.from_pretrained(str(name_or_path)), str(name_or_path))
    except Exception as e:  # network, missing repo and offline mode all raise plain Exceptions
        raise RetrievalError(
            f"tokenizer={name_or_path}: neither a local tokenizer.json (file or folder) nor a Hugging Face model "
            f"that could be read ({e}). Pass a local path, or leave tokenizer=null for the bundled encoder's"
        ) from e
