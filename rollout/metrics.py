"""Answer and retrieval metrics (SQuAD-style normalisation, as in FlashRAG and lm-eval)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golden))


def _f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golden: Sequence[str]) -> float:
    return max((_f1(prediction, g) for g in golden), default=0.0)


def contains_answer(prediction: str, golden: Sequence[str]) -> float:
    """1 when a normalised gold answer appears inside the normalised prediction."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(g and f" {g} " in pred for g in map(normalize_answer, golden)))


def retrieval_recall(retrieved_ids: Iterable[str], gold_ids: Sequence[str]) -> float | None:
    """Share of gold passages retrieved by any tool call of the task; None when there is no gold."""
    gold = set(gold_ids)
    if not gold:
        return None
    return len(gold & set(retrieved_ids)) / len(gold)
