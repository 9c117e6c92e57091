"""`tracker serve`: a local web app over the trace store, SQLite or PostgreSQL.

A small ASGI app (Starlette) whose pages are the store's own analyses rendered as HTML (Jinja2):
the runs and experiments; a run's roofline (Plotly, drawn in the browser from the JS the plotly
package ships, so nothing is fetched from the network), its layer phases with the model beside the
measurement, its stall, cache and traffic figures and its timeline; a layer phase's launches with
every counter; two runs side by side; one figure over commits; and a SQL box that runs through
`tracker sql`'s read-only guard with its limits (``tracker.store.query``), never a second path.

Only GET is served: every other method is refused (405). Every error is one line of text with its
status: a run that is not there 404, a bad parameter 400.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from tracker.errors import StoreError, TrackerError, first_line, shorten
from tracker.extras import install
from tracker.serve import pages

HERE = Path(__file__).parent
MOST_DIGITS = 12  # a run id longer than this is no run of any store
MOST_SQL = 100_000  # characters of a statement the SQL box takes
MOST_REQUEST_LINE = 1 << 20  # bytes uvicorn lets through to the app (h11 cuts a connection past 16 KiB)


def server(app: Starlette, host: str, port: int):
    """The uvicorn server `tracker serve` runs the app with: warnings only, and a request line up to
    1 MiB reaching the app, which refuses a statement too long in one line itself."""
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", h11_max_incomplete_event_size=MOST_REQUEST_LINE
    )
    return uvicorn.Server(config)


def _plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it, found without importing plotly (slow)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise TrackerError(f"tracker serve needs plotly's JavaScript: {install('serve')}")
    return Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js"


STATIC = {"tracker.js": HERE / "static" / "tracker.js", "tracker.css": HERE / "static" / "tracker.css"}


def create_app(db: str | None, reader_url: str | None = None) -> Starlette:
    """The app over the store ``db`` (read only); ``reader_url``: the read-only role the SQL box runs
    as on PostgreSQL, as `tracker sql --reader-url` takes it."""
    from tracker.store import open_store

    store = open_store(db, write=False)
    store.frames = {}  # complete runs' view frames, kept: their rows never change
    static = {**STATIC, "plotly.min.js": _plotly_js()}
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    cache = Finished(store)

    def page(request: Request, name: str, context: dict, plots: bool = False) -> Response:
        status = 400 if context.get("error") else 200  # a refused query or a bad form: one line, and 400
        return templates.TemplateResponse(
            request, name, {"where": store.where, "plots": plots, **context}, status_code=status
        )

    async def serve_static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:  # a fixed list: no path reaches the file system from a request
            raise HTTPException(404, f"no static file {shorten(name)}")
        return FileResponse(static[name])

    def runs(request: Request) -> Response:
        return page(request, "runs.html", {"title": "Runs", **pages.runs(store)})

    def run(request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        return page(
            request, "run.html", cache.get(("run", run_id), (run_id,), lambda: pages.run(store, run_id)), plots=True
        )

    def phase(request: Request) -> Response:
        p = request.path_params
        return page(request, "phase.html", pages.phase(store, _run_id(p["run_id"]), p["layer"], p["phase"]))

    def timeline(request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        body = pages.timeline(store, run_id)
        return Response(
            body,
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="run-{run_id}.json"'},
        )

    def compare(request: Request) -> Response:
        a, b = (_optional_run(request.query_params.get(key)) for key in ("a", "b"))
        found = cache.get(("compare", a, b), (a, b), lambda: pages.compare(store, a, b))
        return page(request, "compare.html", {"title": "Compare two runs", **found})

    def sql(request: Request) -> Response:
        statement = request.query_params.get("q", "")
        if len(statement) > MOST_SQL:
            raise HTTPException(400, f"the statement holds {len(statement):,} characters; at most {MOST_SQL:,}")
        return page(request, "sql.html", {"title": "SQL", **pages.sql(store, statement, reader_url)})

    def history(request: Request) -> Response:
        return page(
            request,
            "history.html",
            {"title": "History", **pages.history(store, dict(request.query_params))},
            plots=True,
        )

    routes = [
        Route("/", runs),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/timeline.json", timeline),
        Route("/runs/{run_id}/{layer}/{phase}", phase),
        Route("/compare", compare),
        Route("/sql", sql),
        Route("/history", history),
        Route("/static/{name}", serve_static),
    ]
    handlers: dict[Any, Any] = {HTTPException: _one_line, TrackerError: _tracker_error, Exception: _internal}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=_warm)


@contextlib.asynccontextmanager
async def _warm(app: Starlette) -> AsyncIterator[None]:
    """Load the analyses (pandas, 1-2 s) beside the listening server, not before it: it answers at once."""
    threading.Thread(target=lambda: importlib.import_module("tracker.analysis.roofline"), daemon=True).start()
    yield


class Finished:
    """Pages of complete runs, kept: a complete run's rows never change, so its page is computed once
    (the key holds each run's end, so a run deleted and its id reused is computed anew)."""

    MOST = 256

    def __init__(self, store) -> None:
        self.store, self.lock = store, threading.Lock()
        self.pages: dict[tuple, dict] = {}

    def get(self, key: tuple, runs: tuple, compute: Callable[[], dict]) -> dict:
        ends = tuple(self._end(run) for run in runs)
        if None in ends:
            return compute()  # a run still running, or none asked for
        with self.lock:
            found = self.pages.get((key, ends))
        if found is None:
            found = compute()
            with self.lock:
                if len(self.pages) >= self.MOST:
                    self.pages.clear()
                self.pages[(key, ends)] = found
        return found

    def _end(self, run: int | None) -> str | None:
        from tracker.store.queries import finished_at

        return None if run is None else finished_at(self.store, run)


def _run_id(text: str) -> int:
    if not text.isdigit() or len(text) > MOST_DIGITS:
        raise HTTPException(400, f"'{shorten(text)}' is not a run id")
    return int(text)


def _optional_run(text: str | None) -> int | None:
    return None if text in (None, "") else _run_id(str(text))


async def _one_line(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", None) or "error"
    return PlainTextResponse(f"Error: {detail}\n", status_code=status)


async def _tracker_error(request: Request, exc: Exception) -> Response:
    """What the store does not hold (a run, a layer phase) is 404; any other refusal 400."""
    status = 404 if isinstance(exc, StoreError) else 400
    return PlainTextResponse(f"Error: {first_line(exc)}\n", status_code=status)


async def _internal(request: Request, exc: Exception) -> Response:
    return PlainTextResponse(f"Error: internal error: {type(exc).__name__}\n", status_code=500)
