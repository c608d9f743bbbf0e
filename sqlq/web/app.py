"""The dashboard's routes: HTML pages, the JSON API under ``/api``, the actions.

Pages (each also under ``/api`` as JSON, in the shapes of sqlq.shapes):

* ``/``: every queue with its tasks per state, the age of its oldest AVAILABLE task,
  its leases, paused or not (``/api/queues``), and charts of a queue's throughput
  and oldest waiting age over the last hour or day (``/api/charts``);
* ``/tasks``: the tasks, filtered by ``state``, ``queue``, ``name`` and id ``prefix``,
  ``order=newest`` (default) or ``order=line``, a keyset page after ``after``
  (``/api/tasks``); ``/dead`` and ``/leases`` are its DEAD and RESERVED tasks;
* ``/task?queue=Q&id=ID``: one task, with its timeline (``/api/task``);
* ``/workers``: the workers alive (the worker registry): host and pid, queue, since
  when, last heartbeat (stale ones marked), the tasks each holds (``/api/workers``);
* ``/metrics``: the Prometheus metrics of sqlq.web.metrics.

Actions are POSTs to ``/actions/<name>`` from the pages' forms, and to
``/api/actions/<name>`` with a JSON body for scripts (see sqlq.web.actions), refused
when the dashboard is read-only, and as they arrive when longer than MAX_BODY (413).
Errors are pages, and under ``/api`` JSON documents: ``{"error": ..., "status": ...}``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .. import payload as payloads
from ..access import check_token
from ..backend import Backend
from ..backends import open_backend
from ..contract import State
from ..durable import Queue
from ..errors import InvalidArgument, SqlqError, StorageError
from ..humanize import byte_size, figure, moment, relative, span
from ..registry import held_text
from . import api, metrics, security
from .actions import ACTIONS, DESTRUCTIVE, Action, Outcome
from .history import History

#: The form fields an action page repeats when it asks for confirmation.
_KEPT = ("queue", "task_id", "payload", "name")

#: The largest body of an action, in bytes: room for the largest payload a queue takes
#: by default, percent-encoded in a form or escaped in JSON.  A longer one is refused
#: (413) as it arrives, before the CSRF check that needs the whole form: a page of any
#: site may send one to a dashboard on this machine.
MAX_BODY = 8 * payloads.DEFAULT_MAX_PAYLOAD_BYTES


class Dashboard:
    """The database the app shows: one backend for every read (read only, opened
    on first use), and a Queue per action."""

    def __init__(self, url: str, read_only: bool) -> None:
        self.url = url
        self.read_only = read_only
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        self.history = History(lambda: self.backend().overview(with_names=False))
        self.pages = jinja2.Environment(
            loader=jinja2.PackageLoader("sqlq.web", "templates"),
            autoescape=True,  # every value escaped: a payload of <script> is text
            undefined=jinja2.StrictUndefined,
        )
        self.pages.filters.update(
            moment=moment,
            relative=relative,
            span=span,
            byte_size=byte_size,
            figure=figure,
            pretty=_pretty,
            held_text=held_text,
        )

    def backend(self) -> Backend:
        with self._lock:
            if self._backend is None:
                self._backend = open_backend(self.url, migrate=False)
            return self._backend

    def database_name(self) -> str:
        """The database's name, as pages show it (a stand-in if it cannot be opened)."""
        try:
            return self.backend().name
        except SqlqError:
            return "(the database cannot be opened)"

    async def perform(self, action: Action, form: dict[str, str]) -> Outcome:
        """``action`` on the queue the form names, on a Queue opened for it."""
        queue = await run_in_threadpool(
            Queue, self.url, lease_seconds=30, max_attempts=1, queue=form.get("queue", ""),
            migrate=False,
        )  # fmt: skip
        try:
            return await run_in_threadpool(action, queue, form, self.database_name())
        finally:
            queue.close()

    def error(self, request: Request, status: int, message: str) -> Response:
        """An error: a page, or a JSON document for the API (and /metrics)."""
        if _under(request, "/api/") or _under(request, "/metrics"):
            return JSONResponse({"error": message, "status": status}, status)
        return self.page(request, "error.html", status, message=message, code=status)

    def metrics(self, _request: Request) -> Response:
        return metrics.endpoint(self.backend())

    def close(self) -> None:
        self.history.stop()
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def page(self, request: Request, template: str, status: int = 200, **values: Any) -> Response:
        """A page: the template filled with ``values``, and what every page needs."""
        csrf = security.csrf_token(request)
        html = self.pages.get_template(template).render(
            base=request.scope.get("root_path", ""),
            read_only=self.read_only,
            csrf=csrf,
            csrf_field=security.CSRF_FIELD,
            database_name=self.database_name(),
            states=[s.value for s in State],
            **{"now": time.time(), **values},
        )
        response = HTMLResponse(html, status)
        security.set_csrf_cookie(response, request, csrf)
        return response


def create_app(database: str, *, read_only: bool = False, token: str | None = None) -> Starlette:
    """The dashboard of the sqlq database ``database`` (a path or URL) as an ASGI app.

    Serve it with any ASGI server, or mount it into your own Starlette or FastAPI
    application under a prefix: ``app.mount("/sqlq", create_app("jobs.db"))``.
    ``read_only``: no actions (the pages show none, the server refuses them).
    ``token``: every request must carry it (``Authorization: Bearer``, or basic auth
    with it as the password); without one, only clients on this machine are served.
    Its database connection closes at the app's shutdown; a mounted app's shutdown is
    the outer app's business (Starlette runs no lifespan of a mounted app), so there
    it closes with the process.
    """
    board = Dashboard(database, read_only)
    return _app(board, _routes(board), token)


def metrics_app(database: str, *, token: str | None = None) -> Starlette:
    """Only ``/metrics`` of the database (see sqlq.web.metrics), guarded as create_app's."""
    board = Dashboard(database, read_only=True)
    return _app(board, [Route("/metrics", board.metrics)], token)


def _app(board: Dashboard, routes: list[BaseRoute], token: str | None) -> Starlette:
    check_token(token)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        yield
        board.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_exception_handler(InvalidArgument, _refused(board, 400))
    app.add_exception_handler(StorageError, _refused(board, 503))
    app.add_exception_handler(HTTPException, _refused(board, None))
    app.add_middleware(security.Guard, token=token)
    return app


def _refused(board: Dashboard, status: int | None) -> Callable[[Request, Exception], Response]:
    """What answers an exception: ``status`` and the error's type and text, or an
    HTTPException's own status and detail (an unknown path: 404)."""

    def handler(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return board.error(request, exc.status_code, exc.detail)
        assert status is not None
        return board.error(request, status, f"{type(exc).__name__}: {exc}")

    return handler


def _under(request: Request, prefix: str) -> bool:
    """Is the request's path, within the app (a mounted one's too), under ``prefix``?"""
    path: str = request.scope["path"]
    root: str = request.scope.get("root_path", "")
    return (path[len(root) :] if path.startswith(root) else path).startswith(prefix)


def _routes(board: Dashboard) -> list[BaseRoute]:
    def queues(request: Request) -> Response:
        return board.page(request, "queues.html", **api.queues_json(board.backend()))

    def tasks(request: Request, **fixed: str) -> Response:
        params = {**request.query_params, **fixed}
        where = replace(api.browse_of(params), payloads=False)  # (the list shows none)
        page = api.tasks_json(board.backend(), where)
        following = None
        if page["next"] is not None:
            following = urlencode({**_given(params), "after": page["next"]})
        title = {"DEAD": "Dead letters", "RESERVED": "Leases"}.get(fixed.get("state", ""), "Tasks")
        return board.page(
            request, "tasks.html", title=title, where=where, filters=_given(params),
            fixed=fixed, following=following, **page,
        )  # fmt: skip

    def task(request: Request) -> Response:
        queue, task_id = request.query_params.get("queue", ""), request.query_params.get("id", "")
        found = api.task_json_of(board.backend(), queue, task_id)
        if found is None:
            missing = f"no task {task_id!r} in queue {queue!r}"
            return board.page(
                request, "message.html", 404, message=missing, done=False, queue=None, task_id=None
            )
        return board.page(request, "task.html", task=found)

    def workers(request: Request) -> Response:
        return board.page(request, "workers.html", **api.workers_of(board.backend()))

    def api_workers(_request: Request) -> Response:
        return JSONResponse(api.workers_of(board.backend()))

    def api_queues(_request: Request) -> Response:
        return JSONResponse(api.queues_json(board.backend()))

    def api_tasks(request: Request) -> Response:
        return JSONResponse(api.tasks_json(board.backend(), api.browse_of(request.query_params)))

    def api_charts(request: Request) -> Response:
        params = request.query_params
        samples = board.history.samples()
        queue, window = params.get("queue", ""), params.get("window", "hour")
        return JSONResponse(api.charts_json(board.backend(), samples, queue, window))

    def api_task(request: Request) -> Response:
        params = request.query_params
        found = api.task_json_of(board.backend(), params.get("queue", ""), params.get("id", ""))
        return JSONResponse(found, 200 if found is not None else 404)

    def action_of(request: Request) -> Action:
        """The action a POST names; HTTPException if it may not be done here."""
        if board.read_only:
            raise HTTPException(403, "this dashboard is read-only: no actions")
        name = request.path_params["name"]
        if name not in ACTIONS:
            raise HTTPException(404, f"no action {name!r} (actions: {', '.join(ACTIONS)})")
        return ACTIONS[name]

    async def act(request: Request) -> Response:
        action = action_of(request)
        form = dict(parse_qsl((await _body(request)).decode(errors="replace")))
        why = security.csrf_refusal(request, form)
        if why is not None:
            raise HTTPException(403, why)
        name = request.path_params["name"]
        if name in DESTRUCTIVE and form.get("confirm") != "yes":
            kept = {k: form[k] for k in _KEPT if k in form}
            return board.page(request, "confirm.html", action=name, form=kept)
        outcome = await board.perform(action, form)
        return board.page(
            request, "message.html", 200 if outcome.done else 409,
            message=outcome.message, done=outcome.done, queue=outcome.document["queue"],
            task_id=form.get("task_id") or None,
        )  # fmt: skip

    async def api_act(request: Request) -> Response:
        action = action_of(request)
        why = security.api_refusal(request)
        if why is not None:
            raise HTTPException(why[0], why[1])
        try:
            text = (await _body(request)).decode()
            payloads.check_depth(text, 1)  # (deeper, json.loads raises RecursionError)
            body = json.loads(text)
        except ValueError as exc:
            raise InvalidArgument(f"the body is not JSON: {exc}") from None
        outcome = await board.perform(action, api.action_form(body))
        document = {**outcome.document, "message": outcome.message}
        return JSONResponse(document, 200 if outcome.done else 409)

    static = StaticFiles(directory=str(resources.files("sqlq.web") / "static"))
    return [
        Route("/", queues),
        Route("/tasks", tasks),
        Route("/dead", lambda r: tasks(r, state="DEAD")),
        Route("/leases", lambda r: tasks(r, state="RESERVED")),
        Route("/task", task),
        Route("/workers", workers),
        Route("/api/queues", api_queues),
        Route("/api/tasks", api_tasks),
        Route("/api/task", api_task),
        Route("/api/workers", api_workers),
        Route("/api/charts", api_charts),
        Route("/metrics", board.metrics),
        Route("/actions/{name}", act, methods=["POST"]),
        Route("/api/actions/{name}", api_act, methods=["POST"]),
        Mount("/static", static, name="static"),
    ]


async def _body(request: Request) -> bytes:
    """An action's body, refused (413) once it is longer than MAX_BODY."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HTTPException(413, f"an action's body is at most {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _pretty(value: Any) -> str:
    """A JSON value as indented text (escaped by the template like any other)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _given(params: Any) -> dict[str, str]:
    """The filters a page was asked for (not its place: ``after``)."""
    return {k: v for k, v in dict(params).items() if v and k != "after"}
