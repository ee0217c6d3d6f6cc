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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one question (Chen et al. 2021): the chance that k of its n samples, drawn
    without replacement, hold at least one of the c correct ones: 1 - C(n-c, k) / C(n, k)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 < k <= n and 0 <= c <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # The product form of the binomial ratio: no huge integers, no overflow (as in the paper's code).
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail
