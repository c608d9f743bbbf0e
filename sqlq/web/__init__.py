"""The web dashboard and metrics of a sqlq database (``pip install 'sqlq-queue[web]'``).

``sqlq web DB`` serves it; ``create_app(DB)`` is the same ASGI app, to mount in your
own Starlette or FastAPI application::

    from fastapi import FastAPI
    from sqlq.web import create_app

    app = FastAPI()
    app.mount("/sqlq", create_app("jobs.db", token=os.environ["SQLQ_WEB_TOKEN"]))

``metrics_app(DB)`` serves only ``/metrics`` (``sqlq metrics``; see sqlq.web.metrics).

Modules: app (the routes and pages), api (what the pages and the JSON API read),
actions (redrive, purge, cancel, pause, resume, add), metrics (Prometheus), security
(access, CSRF, headers); templates/ and static/ hold the pages' HTML and CSS.
"""

from __future__ import annotations

from .app import create_app, metrics_app

__all__ = ["create_app", "metrics_app"]
