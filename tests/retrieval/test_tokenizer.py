import sys

import pytest

from rollout.errors import RetrievalError
from rollout.retrieval import tokenize
from rollout.retrieval.tokenizer import ENGLISH_STOPWORDS, tokenize_batch


def test_lowercases_and_splits_on_punctuation() -> None:
    assert tokenize("Hello, World! Foo-bar.baz") == ["hello", "world", "foo", "bar", "baz"]


def test_codes_split_at_hyphens_and_keep_digits() -> None:
    assert tokenize("Model VX-1234 (rev 2)") == ["model", "vx", "1234", "rev", "2"]
    assert tokenize("registry ID P-92941, code ORG-4419") == ["registry", "id", "p", "92941", "code", "org", "4419"]


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
    assert tokenize("the of and", stemming=True) == []


def test_stopword_list_is_small_and_lowercase() -> None:
    assert 0 < len(ENGLISH_STOPWORDS) < 150
    assert all(w == w.lower() and w.isalpha() for w in ENGLISH_STOPWORDS)
    # Words that carry meaning in keyword questions stay searchable.
    assert not {"first", "most", "not", "no"} & ENGLISH_STOPWORDS


def test_no_stemming_by_default() -> None:
    assert tokenize("Borns founded running") == ["borns", "founded", "running"]


def test_stemming_merges_word_forms() -> None:
    assert tokenize("born borns Borns", stemming=True) == ["born", "born", "born"]
    assert tokenize("founded founding founds", stemming=True) == ["found", "found", "found"]
    assert tokenize("running runs", stemming=True) == ["run", "run"]


def test_stemming_leaves_numbers_and_codes_alone() -> None:
    assert tokenize("VX-1234 in 1947", stemming=True) == ["vx", "1234", "1947"]


def test_stopwords_are_dropped_before_stemming() -> None:
    # "does" is a stopword; stemmed first it would become "doe" and slip through the list.
    assert tokenize("Where does he live", stemming=True) == ["live"]
    assert tokenize("Where does he live", stopwords=False, stemming=True) == ["where", "doe", "he", "live"]


def test_batch_equals_one_by_one() -> None:
    texts = ["Where was Ravel born?", "", "Founded in 1637 by the Borns", "VX-1234"]
    for options in ({}, {"stopwords": False}, {"stemming": True}, {"stopwords": False, "stemming": True}):
        assert tokenize_batch(texts, **options) == [tokenize(t, **options) for t in texts]


def test_stemming_without_pystemmer_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # makes `import Stemmer` fail
    with pytest.raises(RetrievalError, match="pip install PyStemmer"):
        tokenize("born", stemming=True)
    # Without stemming, PyStemmer is never imported.
    assert tokenize("born") == ["born"]
