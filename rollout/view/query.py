"""What the task table shows: filters, sort and page, read from and written to a URL's query string.

The state lives in the URL so that a view is a link: `?status=ok&right=wrong&tool=search&q=voss&sort=
tokens&desc=1&page=2`. Every key is optional; a value the viewer does not know is refused with a message
naming the values it knows, not silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

from rollout.errors import ViewError
from rollout.report.scoring import STATUSES
from rollout.view.index import TrajectoryIndex

PAGE_SIZE = 200
SORTS = {
    "order": "file order", "id": "id", "status": "status", "em": "right/wrong", "question": "question",
    "prediction": "prediction", "gold": "gold", "calls": "tool calls", "tokens": "tokens", "cost": "cost",
    "latency_s": "time",
}
"""Sortable columns: the URL's `sort` value and the column's heading."""
KEPT_QUERIES = 8
"""Queries whose matching rows an index keeps (`TableQuery.matches`)."""
STOPS = {"cut": "truncated", "out_of_turns": "out_of_turns", "out_of_context": "out_of_context"}
"""`stop=`: the scored tasks an agent's own limit ended — its answer cut at max_tokens, its turns spent, or its
conversation past the model's context window — each the index column that flags it."""
RIGHT = ("right", "wrong")
"""`right=right`: exact match 1; `right=wrong`: a scored task with exact match 0 (failed tasks are neither)."""


@dataclass(frozen=True, slots=True)
class TableQuery:
    """Filters, sort and page of a task table; the defaults show every task in file order."""

    status: str = ""
    right: str = ""
    tool: str = ""
    stop: str = ""
    """One of `STOPS`: only the tasks that limit ended."""
    q: str = ""
    """Case-insensitive text searched in the id, question, prediction and gold answers."""
    sort: str = "order"
    desc: bool = False
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TableQuery:
        """The query of a URL's parameters; unknown values raise ViewError naming the known ones."""
        status, right = params.get("status", ""), params.get("right", "")
        sort = params.get("sort", "order") or "order"
        if status and status not in STATUSES:
            raise ViewError(f"status={status!r} is not a task status; use one of: {', '.join(STATUSES)}")
        if right and right not in RIGHT:
            raise ViewError(f"right={right!r}: use right or wrong")
        stop = params.get("stop", "")
        if stop and stop not in STOPS:
            raise ViewError(f"stop={stop!r} is not a limit an agent stops at; use one of: {', '.join(STOPS)}")
        if sort not in SORTS:
            raise ViewError(f"sort={sort!r} is not a column; sort by one of: {', '.join(SORTS)}")
        try:
            page = max(1, int(params.get("page", "1") or 1))
        except ValueError:
            raise ViewError(f"page={params.get('page')!r} is not a page number") from None
        return cls(status=status, right=right, tool=params.get("tool", ""), stop=stop, q=params.get("q", "").strip(),
                    sort=sort, desc=params.get("desc", "") in ("1", "true"), page=page)

    def params(self, **changes: Any) -> dict[str, str]:
        """The URL parameters of this query (with `changes`), defaults left out so links stay short."""
        query = replace(self, **changes)
        out: dict[str, str] = {}
        for f in fields(query):
            value, default = getattr(query, f.name), f.default
            if value != default:
                out[f.name] = "1" if value is True else str(value)
        return out

    def but(self, **changes: Any) -> TableQuery:
        """This query with `changes`."""
        return replace(self, **changes)

    def cleared(self) -> TableQuery:
        """No filters, the same order."""
        return TableQuery(sort=self.sort, desc=self.desc)

    def url(self) -> str:
        """`?...` for a link to this query ("" for the default view, so its link is the page's own)."""
        params = self.params()
        return "?" + urlencode(params) if params else ""

    @property
    def filtered(self) -> bool:
        return bool(self.status or self.right or self.tool or self.stop or self.q)

    def matches(self, index: TrajectoryIndex) -> list[int]:
        """Rows of `index` that pass the filters, in the query's order.

        The rows of the last `KEPT_QUERIES` queries (page aside) are kept until the index changes: each task page
        finds its previous and next within its query's rows, and paging goes through the same rows, so a view of
        100,000 tasks is filtered and sorted once, not on every click."""
        kept: dict[tuple[Any, ...], list[int]] = index.memo("matches", dict)
        key = (self.status, self.right, self.tool, self.stop, self.q, self.sort, self.desc)
        if key not in kept:
            if len(kept) >= KEPT_QUERIES:
                del kept[next(iter(kept))]  # the oldest
            kept[key] = self._matches(index)
        return list(kept[key])

    def _matches(self, index: TrajectoryIndex) -> list[int]:
        cols = index.columns
        rows: list[int] = list(range(len(index)))
        if self.status:
            status = cols["status"]
            rows = [i for i in rows if status[i] == self.status]
        if self.right:
            em, want = cols["em"], 1.0 if self.right == "right" else 0.0
            rows = [i for i in rows if em[i] == want]
        if self.tool:
            tools = cols["tools"]
            rows = [i for i in rows if self.tool in tools[i].split(",")]
        if self.stop:
            flag = cols[STOPS[self.stop]]
            rows = [i for i in rows if flag[i]]
        if self.q:
            needle = self.q.casefold()
            texts = (cols["id"], cols["question"], cols["prediction"], cols["gold"])
            rows = [i for i in rows if any(needle in t[i].casefold() for t in texts)]
        if self.sort != "order":
            rows.sort(key=_sort_key(cols[self.sort]), reverse=self.desc)
        elif self.desc:
            rows.reverse()
        return rows

    def page_of(self, rows: list[int]) -> tuple[list[int], int]:
        """The rows of this query's page and the number of pages (at least 1)."""
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        start = (min(self.page, pages) - 1) * PAGE_SIZE
        return rows[start:start + PAGE_SIZE], pages


def _sort_key(column: list[Any]):
    """Sort key over a column with None (unknown) values: they go last in ascending order."""
    def key(i: int) -> tuple[bool, Any]:
        value = column[i]
        return (value is None, value if value is not None else 0) if not isinstance(value, str) else (False, value.casefold())
    return key
