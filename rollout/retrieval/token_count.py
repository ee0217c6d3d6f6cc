"""Counting and cutting text in model tokens: the one tokenizer the gateway's budgets and context counts share.

`tokenizer=` names it: null is the bundled encoder's (all-MiniLM-L6-v2's WordPiece, no download); a folder
holding `tokenizer.json` or such a file itself (for example a local copy of the LLM's); or a Hugging Face
model name, read from the local cache (or downloaded when the machine may). The `tokenizers` library reads
them all, without torch. Special tokens are not counted: a count is of the text itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollout.errors import RetrievalError

TOKENIZER_FILE = "tokenizer.json"


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

    def count(self, text: str) -> int:
        """Tokens of `text` (0 for an empty text)."""
        if not text:
            return 0
        return self.count_batch([text])[0]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """`count` of each text, encoded in one batch (without character offsets, which counting does not need:
        a fifth faster)."""
        if not texts:
            return []
        return [len(e.ids) for e in self._encode_fast(list(texts), add_special_tokens=False)]

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut where a token ends, that counts at most `max_tokens` tokens."""
        if max_tokens <= 0 or not text:
            return ""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= max_tokens:
            return text
        # A word-piece cut can re-tokenize differently ("playing" cut after "play"); step back until it fits.
        for end in range(max_tokens, 0, -1):
            cut = text[: encoding.offsets[end - 1][1]].rstrip()
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
        from rollout.retrieval.encoder import bundled_model_path

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
