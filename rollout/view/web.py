"""`rollout view RUN [RUN ...] --serve`: the web viewer, server-rendered HTML over the run folders.

Pages are Jinja2 templates (autoescaped: questions, predictions and tool results are model output and
may hold HTML) served by Starlette. The filters, sort and page of a task table live in the URL, so a
view is a link; the pages work without JavaScript except for live updates and "copy as JSON". A run
still being written is followed by polling `/run/N/poll?offset=B`, B being the trajectory's size the
page was rendered at: the server indexes what was appended since and sends the new rows.

Only the run folders named on the command line are read, by number (`/run/0`): no URL carries a
path. The server binds to 127.0.0.1; any other address needs a token (`--token` or
`ROLLOUT_VIEW_TOKEN`), which a browser presents once as `?token=...` and then keeps as a cookie.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rollout.errors import ViewError
from rollout.report.scoring import METRICS, STATUSES
from rollout.view.pages import (
    CELLS,
    SUMMARY_METRICS,
    Run,
    comparison,
    comparison_plots,
    fmt,
    grid,
    question_sets,
    run_summary,
    scores,
    tool_names,
    tool_table,
)
from rollout.view.query import PAGE_SIZE, SORTS, STOPS, TableQuery
from rollout.view.transcript import neighbours, task_view

COLUMNS = [("id", "id"), ("status", "status"), ("em", "answer"), ("question", "question"),
           ("prediction", "prediction"), ("gold", "gold"), ("calls", "tool calls"), ("tokens", "tokens"),
           ("latency_s", "time s")]
NUMERIC = {"calls", "tokens", "cost", "latency_s"}


@functools.cache
def _asset(name: str) -> str:
    return resources.files("rollout.view").joinpath("assets", name).read_text(encoding="utf-8")


class ServedLinks:
    """URLs of the served pages."""

    def __init__(self, runs: list[Run]):
        self.runs = runs

    def home(self) -> str:
        return "/"

    def run(self, n: int, query: TableQuery | None = None) -> str:
        return f"/run/{n}" + (query.url() if query else "")

    def run_action(self, n: int) -> str:
        return f"/run/{n}"

    def task(self, n: int, row: int, query: TableQuery | None) -> str:
        cols = self.runs[n].index.columns
        params = {"id": cols["id"][row], **({"repeat": str(cols["repeat"][row])} if cols["repeat"][row] else {})}
        params.update((query or TableQuery()).params(page=1))
        return f"/run/{n}/task?" + urlencode(params)

    def anchor(self, n: int, row: int, anchor: str) -> str:
        return f"#task-{anchor}"

    def poll(self, n: int, query: TableQuery) -> str:
        return f"/run/{n}/poll" + query.url()

    def compare(self, a: int, b: int) -> str:
        return f"/compare?a={a}&b={b}"

    def compare_action(self) -> str:
        return "/compare"

    def cell(self, a: int, b: int, cell: str, page: int = 1) -> str:
        return f"/compare?a={a}&b={b}&cell={cell}" + (f"&page={page}" if page > 1 else "")

    def pair(self, a: int, b: int, qid: str, repeat: int) -> str:
        return "/compare/task?" + urlencode({"a": a, "b": b, "id": qid, **({"repeat": repeat} if repeat else {})})


@dataclass(frozen=True, slots=True)
class Question:
    """A question of a compare cell: its id and the repeat shown side by side (the first both runs have)."""

    id: str
    repeat: int


class Viewer:
    """The runs on show and every page rendered from them; `links` decides where the pages' links go
    (this server, or sections of one static file)."""

    def __init__(self, runs: list[Run], root: Path, *, static: bool = False, links: Any = None):
        if not runs:
            raise ViewError("no runs to show")
        self.runs, self.root, self.static = runs, root, static
        self.links = links or ServedLinks(runs)
        self.env = Environment(loader=PackageLoader("rollout.view", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True),
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(fmt=fmt, links=self.links, runs=runs, static=static)
        self._comparison: tuple[Any, list[str], tuple[int, ...]] | None = None

    def warm(self) -> None:
        """Compile the templates and compute each run's summary (what a run page's first view waits for)."""
        for name in self.env.list_templates():
            self.env.get_template(name)
        for run in self.runs:
            self.run_section(run, TableQuery())

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)

    def page(self, title: str, body: str, **context: Any) -> str:
        """A whole HTML document around one page's section."""
        return self.render("page.html.j2", title=title, body=body, css=_asset("viewer.css"), js=_asset("viewer.js"),
                           **context)

    def run(self, n: int) -> Run:
        if not 0 <= n < len(self.runs):
            raise LookupError(f"no run {n}: this viewer shows runs 0 to {len(self.runs) - 1}")
        return self.runs[n]

    # --- sections -------------------------------------------------------------------------------

    def home_section(self, page_id: str = "home", route: str = "") -> str:
        """The runs, each with its main scores: the built-in metrics the run page's summary shows first."""
        summaries = [run_summary(run) for run in self.runs]
        return self.render("home.html.j2", page_id=page_id, route=route, root=self.root, summaries=summaries,
                           metric_names=list(SUMMARY_METRICS), sets=question_sets(self.runs))

    def run_section(self, run: Run, query: TableQuery, *, page_id: str = "run", route: str = "", all_rows: bool = False) -> str:
        """The run page; `all_rows` renders every task (the static file filters and pages in the browser)."""
        matched = query.matches(run.index)
        rows, pages = (matched, 1) if all_rows else query.page_of(matched)
        return self.render(
            "run.html.j2", page_id=page_id, route=route, run=run, query=query, summary=run_summary(run), tools=tool_table(run),
            tool_names=tool_names(run), statuses=STATUSES, stops=list(STOPS), rows=rows, matched=len(matched), pages=pages,
            columns=COLUMNS, sorts=SORTS, numeric=NUMERIC, page_size=PAGE_SIZE)

    def rows_html(self, run: Run, rows: list[int], query: TableQuery) -> str:
        macro = self.env.get_template("macros.html.j2").module.task_row  # type: ignore[attr-defined]
        return "".join(str(macro(run, i, run.index.columns, self.links, query)) for i in rows)

    def task_section(self, run: Run, row: int, query: TableQuery, *, page_id: str = "task", route: str = "",
                     around: tuple[int | None, int | None] = (None, None)) -> str:
        return self.render("task.html.j2", page_id=page_id, route=route, run=run, row=row, query=query,
                           view=task_view(run.index, row, scores(run)), prev=around[0], next=around[1])

    def comparison(self) -> tuple[Any, list[str]]:
        """`report compare` of every run (its tables and plots), made again only when a run has grown."""
        sizes = tuple(r.index.size for r in self.runs)
        if self._comparison is None or self._comparison[2] != sizes:
            c = comparison(self.runs)
            self._comparison = (c, comparison_plots(c), sizes)
        return self._comparison[0], self._comparison[1]

    def compare_section(self, a: int, b: int, *, page_id: str = "compare", route: str = "") -> str:
        ra, rb = self.run(a), self.run(b)
        c, plots = self.comparison()
        return self.render("compare.html.j2", page_id=page_id, route=route, a=ra, b=rb, grid=grid(ra.index, rb.index), c=c,
                           plots=plots, metric_names=c.metrics, builtin=METRICS)

    def cell_questions(self, a: int, b: int, cell: str) -> list[Question]:
        if cell not in CELLS:
            raise ViewError(f"cell={cell!r}: use one of {', '.join(CELLS)}")
        ra, rb = self.run(a), self.run(b)
        out = []
        for qid in grid(ra.index, rb.index).cells[cell]:
            shared = [r for r in ra.index.repeats_of(qid) if rb.index.position(qid, r) is not None]
            out.append(Question(qid, shared[0] if shared else 0))
        return out

    def cell_section(self, a: int, b: int, cell: str, page: int = 1, *, page_id: str = "cell", route: str = "",
                     all_rows: bool = False, questions: list[Question] | None = None) -> str:
        """A compare cell's questions (`questions` when the caller has them: `cell_questions`), a page of them or
        `all_rows`."""
        questions = self.cell_questions(a, b, cell) if questions is None else questions
        pages = 1 if all_rows else max(1, -(-len(questions) // PAGE_SIZE))
        page = min(max(1, page), pages)
        shown = questions if all_rows else questions[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        return self.render("cell.html.j2", page_id=page_id, route=route, a=self.run(a), b=self.run(b), cell=cell,
                           cell_title=CELLS[cell], questions=questions, shown=shown, page=page, pages=pages)

    def pair_section(self, a: int, b: int, qid: str, repeat: int, *, page_id: str = "pair", route: str = "") -> str:
        sides = []
        for run in (self.run(a), self.run(b)):
            row = run.index.position(qid, repeat)
            view = None if row is None else task_view(run.index, row, scores(run))
            gold = set() if view is None else {str(d) for d in view.task.metadata.get("gold_doc_ids", []) or []}
            sides.append({"run": run, "row": row, "view": view, "gold": gold})
        if all(s["view"] is None for s in sides):
            raise ViewError(f"neither run has task {qid!r} (repeat {repeat})")
        return self.render("pair.html.j2", page_id=page_id, route=route, a=self.run(a), b=self.run(b), qid=qid, repeat=repeat,
                           sides=sides)


# --- the server -----------------------------------------------------------------------------------


def _int(params: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(params.get(key, default))
    except ValueError:
        raise ViewError(f"{key}={params.get(key)!r} is not a number") from None


def create_app(viewer: Viewer, *, token: str | None = None) -> ASGIApp:
    """The viewer as an ASGI app; with `token`, every request must present it (see `TokenCookie`)."""

    def html(title: str, body: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(viewer.page(title, body, **context), status_code=status_code)

    async def home(request: Request) -> Response:
        if len(viewer.runs) == 1:
            return RedirectResponse("/run/0")
        return html("runs", viewer.home_section())

    async def run_page(request: Request) -> Response:
        run = viewer.run(request.path_params["n"])
        run.refresh()
        return html(run.label, viewer.run_section(run, TableQuery.from_params(request.query_params)),
                    current_run=run.number)

    async def task_page(request: Request) -> Response:
        run = viewer.run(request.path_params["n"])
        params = request.query_params
        row = _task_row(run, params)
        query = TableQuery.from_params(params)
        around = neighbours(query.matches(run.index), row)
        return html(f"task {run.index.columns['id'][row]}", viewer.task_section(run, row, query, around=around),
                    current_run=run.number)

    async def poll(request: Request) -> Response:
        run = viewer.run(request.path_params["n"])
        params = request.query_params
        offset = _int(params, "offset", 0)
        restarted = offset > run.index.size
        run.refresh()
        if run.index.size < offset:
            restarted = True
        query = TableQuery.from_params(params)
        offsets = run.index.columns["offset"]
        matching = query.but(sort="order", desc=False).matches(run.index)
        new = [i for i in matching if offsets[i] >= offset]
        return JSONResponse({"offset": run.index.size, "tasks": len(run.index), "matched": len(matching),
                             "restarted": restarted, "new": len(new), "rows": viewer.rows_html(run, new, query)})

    async def compare_page(request: Request) -> Response:
        params = request.query_params
        a, b = _int(params, "a", 0), _int(params, "b", 1 if len(viewer.runs) > 1 else 0)
        if len(viewer.runs) < 2:
            raise ViewError("compare needs two runs: rollout view RUN_A RUN_B --serve, or a sweep's folder")
        if "cell" in params:
            return html("compare", viewer.cell_section(a, b, params["cell"], _int(params, "page", 1)))
        return html("compare", viewer.compare_section(a, b))

    async def pair_page(request: Request) -> Response:
        params = request.query_params
        if "id" not in params:
            raise ViewError("which task? /compare/task?a=0&b=1&id=<task id>")
        return html(f"task {params['id']}", viewer.pair_section(_int(params, "a", 0), _int(params, "b", 1),
                                                                 params["id"], _int(params, "repeat", 0)))

    def refused(status: int) -> Callable[[Request, Exception], Any]:
        async def handler(request: Request, exc: Exception) -> Response:
            message = exc.args[0] if exc.args else str(exc)
            return html("error", viewer.render("error.html.j2", message=message), status_code=status)
        return handler

    app: ASGIApp = Starlette(
        routes=[Route("/", home), Route("/run/{n:int}", run_page), Route("/run/{n:int}/task", task_page),
                Route("/run/{n:int}/poll", poll), Route("/compare", compare_page), Route("/compare/task", pair_page)],
        exception_handlers={ViewError: refused(400), LookupError: refused(404)},
    )
    return TokenCookie(app, token) if token else app


def _task_row(run: Run, params: Mapping[str, str]) -> int:
    if "id" not in params:
        raise ViewError(f"which task? /run/{run.number}/task?id=<task id>")
    repeat = _int(params, "repeat", 0)
    row = run.index.position(params["id"], repeat)
    if row is None:
        run.refresh()
        row = run.index.position(params["id"], repeat)
    if row is None:
        raise LookupError(f"run {run.label} has no task {params['id']!r}" + (f" repeat {repeat}" if repeat else ""))
    return row


class TokenCookie:
    """ASGI middleware for a viewer bound beyond loopback: a request must carry the token, as `?token=` (the
    link one shares) or as the cookie the first such request sets; anything else gets 403."""

    COOKIE = "rollout_view_token"

    def __init__(self, app: ASGIApp, token: str):
        self.app, self._token = app, token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is None:
            cookie = SimpleCookie(request.headers.get("cookie", ""))
            given = cookie[self.COOKIE].value if self.COOKIE in cookie else None
        if given is None or not hmac.compare_digest(given.encode(), self._token):
            response = HTMLResponse("This viewer needs its token: open the link it printed (…?token=…).", status_code=403)
            await response(scope, receive, send)
            return
        if "token" in request.query_params:
            async def send_with_cookie(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    headers = list(message.get("headers", []))
                    headers.append((b"set-cookie", f"{self.COOKIE}={given}; HttpOnly; SameSite=Strict; Path=/".encode()))
                    message = {**message, "headers": headers}
                await send(message)
            await self.app(scope, receive, send_with_cookie)
            return
        await self.app(scope, receive, send)
