"""Does a Lucene index name the corpus' passages by the corpus' ids? Checked on a sample when the index opens.

Lucene answers with document ids, and the retriever serves the corpus passages of those ids. An index built with
ids one off from the corpus' (DPR's passage file and Pyserini's prebuilt `wikipedia-dpr-100w` number passages from
1, FlashRAG's corpus files from 0) would serve, for every hit, a passage Lucene did not score, with nothing to show
for it; an index of another corpus would answer every query with no passage. So before the first search, a fixed
sample of the index's stored documents (spread over the whole index) is compared with the corpus' passages of the
same ids: most of their ids must be corpus ids, and their stored text (`raw`, else `contents`) must be the
passage's. An index that stores no text can only be checked for its ids; a warning says so.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollout.errors import RetrievalError

logger = logging.getLogger(__name__)

SAMPLE = 64
"""Stored documents read at open: a few milliseconds, whatever the index's size."""
SAME_TEXT = 0.5
"""Share of the shorter text's word trigrams the other must hold for two texts to be the same passage. The same
passage written two ways (title quoted or not, another whitespace) shares nearly all; two neighbouring passages of
one article share almost none."""
MAX_DIFFERENT = 0.25
"""Share of the compared documents whose text may differ from the corpus' before the index is refused (a corpus
whose passages were cleaned again after indexing differs in a few)."""


@dataclass(frozen=True, slots=True)
class StoredDoc:
    """One document of the index as stored."""

    id: str
    """Its Lucene document id."""
    text: str | None
    """Its stored text (the `contents` of its raw JSON, the raw text, or the `contents` field); None if none is kept."""


def stored_text(raw: str | None, contents: str | None) -> str | None:
    """The text of a document from its stored `raw` (JsonCollection keeps the JSON line) or `contents` field."""
    if raw:
        try:
            record = json.loads(raw)
        except ValueError:
            return raw
        if isinstance(record, dict):
            if isinstance(record.get("contents"), str):
                return record["contents"]
            parts = [record.get(key) for key in ("title", "text")]
            if any(isinstance(part, str) for part in parts):
                return "\n".join(part for part in parts if isinstance(part, str))
        return raw
    return contents or None


def sample_positions(num_docs: int) -> list[int]:
    """Lucene's internal document numbers to read: `SAMPLE` of them, evenly spread from the first to the last."""
    if num_docs <= 0:
        return []
    return sorted({int(i) for i in np.linspace(0, num_docs - 1, min(SAMPLE, num_docs))})


def check_ids(index: str, docs: Sequence[StoredDoc], passages: Sequence[Any],
              rows_of: Callable[[Sequence[str]], np.ndarray], hint: str) -> None:
    """Raise a RetrievalError unless most sampled documents are corpus passages of the same ids and the same text.

    `hint` says how to build an index from the corpus; it ends the error.
    """
    if not docs:
        return
    rows = np.asarray(rows_of([d.id for d in docs]), dtype=np.int64)
    absent = [d.id for d, row in zip(docs, rows, strict=True) if row < 0]
    if 2 * len(absent) > len(docs):
        raise RetrievalError(
            f"{len(absent)} of {len(docs)} sampled documents of the Lucene index at {index} have ids the corpus does "
            f"not hold (e.g. {_short(absent[0])} in the index, {_short(passages[0].id)} in the corpus): the index "
            f"was built from another corpus; use the index of this corpus, or {hint}"
        )
    compared = [(d, int(row)) for d, row in zip(docs, rows, strict=True) if row >= 0 and d.text is not None]
    if not compared:
        logger.warning(
            "the Lucene index at %s stores no document text (built without --storeRaw or --storeContents), so "
            "only that its ids are corpus ids was checked, not that each names the same passage: ids one off "
            "from the corpus' would serve other passages than Lucene scored", index)
        return
    different = [(d, row) for d, row in compared if not same_text(d.text or "", passages[row].contents)]
    if not different:
        return
    doc, row = different[0]
    example = (f"e.g. id {_short(doc.id)} is {_short(doc.text or '')} in the index but "
               f"{_short(passages[row].contents)} in the corpus{_offset_note(doc, passages, rows_of)}")
    if len(different) > MAX_DIFFERENT * len(compared):
        raise RetrievalError(
            f"the Lucene index at {index} holds other text than the corpus under the same ids ({len(different)} of "
            f"{len(compared)} sampled documents differ; {example}), so its hits would serve other passages than "
            f"it scored; use the index of this corpus, or {hint}"
        )
    logger.warning("%d of %d sampled documents of the Lucene index at %s differ from the corpus' passages of the "
                   "same ids (%s)", len(different), len(compared), index, example)


def same_text(a: str, b: str) -> bool:
    """Whether `a` and `b` are one passage, however cased, spaced and punctuated (a title quoted, or missing)."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return wa == wb
    n = 3 if min(len(wa), len(wb)) >= 3 else 1
    ga = {tuple(wa[i:i + n]) for i in range(len(wa) - n + 1)}
    gb = {tuple(wb[i:i + n]) for i in range(len(wb) - n + 1)}
    return len(ga & gb) >= SAME_TEXT * min(len(ga), len(gb))


def _offset_note(doc: StoredDoc, passages: Sequence[Any], rows_of: Callable[[Sequence[str]], np.ndarray]) -> str:
    """For a numeric id whose text is the corpus' passage of the id one below or above: say the ids are one off."""
    if not doc.id.isdigit() or doc.text is None:
        return ""
    for step in (-1, 1):
        other = str(int(doc.id) + step)
        row = int(np.asarray(rows_of([other]), dtype=np.int64)[0])
        if row >= 0 and same_text(doc.text, passages[row].contents):
            return (f"; it is the corpus' passage {other}: the index numbers passages from "
                    f"{'1' if step == -1 else '0'}, the corpus from {'0' if step == -1 else '1'}")
    return ""


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _short(text: str, width: int = 60) -> str:
    """`text` quoted on one line, cut to about `width` characters."""
    return repr(text if len(text) <= width else text[: width - 1] + "…")
