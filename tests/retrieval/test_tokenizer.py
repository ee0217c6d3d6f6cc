from rollout.retrieval import tokenize
from rollout.retrieval.tokenizer import ENGLISH_STOPWORDS


def test_lowercases_and_splits_on_punctuation() -> None:
    assert tokenize("Hello, World! Foo-bar.baz") == ["hello", "world", "foo", "bar", "baz"]


def test_codes_split_at_hyphens_and_keep_digits() -> None:
    assert tokenize("Model VX-1234 (rev 2)") == ["model", "vx", "1234", "rev", "2"]


def test_underscores_separate_tokens() -> None:
    assert tokenize("snake_case_name") == ["snake", "case", "name"]


def test_stopwords_removed_by_default_and_kept_on_request() -> None:
    text = "Where was the author of the book born?"
    assert tokenize(text) == ["author", "book", "born"]
    assert tokenize(text, stopwords=False) == ["where", "was", "the", "author", "of", "the", "book", "born"]


def test_non_ascii_letters_stay_inside_words() -> None:
    assert tokenize("Zürich and São Paulo") == ["zürich", "são", "paulo"]


def test_nothing_to_tokenize() -> None:
    assert tokenize("") == []
    assert tokenize(" -- ... !! ") == []
    assert tokenize("the of and") == []


def test_stopword_list_is_small_and_lowercase() -> None:
    assert 0 < len(ENGLISH_STOPWORDS) < 150
    assert all(w == w.lower() and w.isalpha() for w in ENGLISH_STOPWORDS)
    # Words that carry meaning in keyword questions stay searchable.
    assert not {"first", "most", "not", "no"} & ENGLISH_STOPWORDS
