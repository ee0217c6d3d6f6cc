"""rollout.llm.token_count: counts equal the tokenizer's own, cuts fit the budget, bad names say the fix."""

import json
import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from rollout.errors import RetrievalError
from rollout.llm.token_count import TokenCounter, load_token_counter
from rollout.paths import bundled_model_path

COUNTER = load_token_counter(None)


def _encoded(counter: TokenCounter, text: str) -> int:
    return len(counter._tokenizer.encode(text, add_special_tokens=False).ids)


def test_word_by_word_counts_equal_the_tokenizers_own_count():
    rnd = random.Random(0)
    words = ["Arlen", "Voss", "founded", "the", "Kelmor", "glassworks", "in", "1921.", "ORG-5521", "naïve",
             "café", "東京タワー", "don't", "\"text\":", "{", "},", "x\u00a0y", "a\x1cb", "É\u0301"]
    texts = [json.dumps({"results": [{"text": " ".join(rnd.choices(words, k=40))} for _ in range(5)]}, indent=2)
             for _ in range(50)]
    texts += [" ".join(rnd.choices(words, k=40)) for _ in range(50)]  # raw: JSON escapes control characters
    texts += ["tab\there\rand\n\nnewlines", "  leading and trailing  ", "one", "\u2003wide\u2003space"]
    assert COUNTER._by_word  # the bundled WordPiece adds up word by word
    for text in texts * 2:  # the second pass reads the words' counts from the cache
        assert COUNTER.count(text) == _encoded(COUNTER, text), text[:60]
    assert COUNTER.count("") == 0


def test_a_tokenizer_that_does_not_split_at_spaces_encodes_the_whole_text():
    vocab = {"[UNK]": 0, "▁a": 1, "▁b": 2, "a": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    counter = TokenCounter(tokenizer, "metaspace")
    assert not counter._by_word
    assert counter.count("a b a") == _encoded(counter, "a b a") == 3


@pytest.mark.parametrize("budget", [1, 5, 12])
def test_a_cut_text_fits_its_budget_and_starts_the_text(budget):
    text = "Unbelievably, the glassworks of Kelmor outlived their founder by a century."
    cut = COUNTER.truncate(text, budget)
    assert text.startswith(cut) and 0 < COUNTER.count(cut) <= budget
    assert COUNTER.truncate(text, 1000) == text and COUNTER.truncate(text, 0) == ""


def test_bad_tokenizer_names_say_what_to_pass(tmp_path):
    with pytest.raises(RetrievalError, match="the folder has no tokenizer.json"):
        load_token_counter(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    with pytest.raises(RetrievalError, match="not a tokenizers file"):
        load_token_counter(str(tmp_path / "tokenizer.json"))
    folder = load_token_counter(bundled_model_path())  # a folder holding tokenizer.json
    assert folder.count("Arlen Voss") == COUNTER.count("Arlen Voss")


def _browsecomp_plus_snippet(tokenizer: Tokenizer, text: str, snippet_max_tokens: int) -> str:
    # Copied from texttron/BrowseComp-Plus searcher/tools.py (commit 97c637c), `search`: its snippet is the decoded
    # first `snippet_max_tokens` tokens (a `tokenizers.Tokenizer` here in place of its transformers AutoTokenizer,
    # whose `encode`/`decode` are the same calls on the same tokenizer.json).
    tokens = tokenizer.encode(text, add_special_tokens=False).ids
    if len(tokens) > snippet_max_tokens:
        truncated_tokens = tokens[:snippet_max_tokens]
        return tokenizer.decode(truncated_tokens, skip_special_tokens=True)
    return text


def test_a_cut_keeps_its_last_tokens_whitespace_as_browsecomp_plus_snippets_do():
    # Qwen's kind of tokenizer: byte-level BPE, where a run of spaces or newlines is a token of its own, so the
    # first N tokens can end in whitespace (trained here, offline).
    texts = ["Kelmor glassworks\n\nFounded in 1921 by Arlen Voss.  It outlived its founder.\n",
             "Title line\n\n\nBody   text with  double  spaces\tand tabs\t\tand a last line\n\n",
             "one two three four five six seven eight nine ten"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts * 3, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    counter = TokenCounter(tokenizer, "bpe")
    ending_in_whitespace = 0
    for text in texts:
        for max_tokens in range(1, len(tokenizer.encode(text).ids) + 2):
            cut = _browsecomp_plus_snippet(tokenizer, text, max_tokens)
            assert counter.truncate(text, max_tokens) == cut, (text[:20], max_tokens)
            ending_in_whitespace += cut != cut.rstrip()
    assert ending_in_whitespace  # the texts exercise what stripping would change
