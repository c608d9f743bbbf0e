"""A worker's own Prometheus metrics: ``Worker(queue, handler, metrics_port=N)`` serves
them at ``http://127.0.0.1:N/metrics`` while it runs (prometheus-client: the ``web``
extra).  ``metrics_host`` serves another address, under the dashboard's rule
(sqlq.access): any address but a loopback one needs ``metrics_token``, which every
request must then carry (``Authorization: Bearer``, or basic auth with it as the
password: Prometheus's ``authorization`` or ``basic_auth`` of a scrape config).

Each worker process serves its own, from its own memory: Prometheus scrapes every
worker (a port each, or the same port in each container) and sums them with
``sum by (le) (rate(...))``, so that no file or table shared by the processes grows
with them, and the queue's calls write nothing more.  The database's own figures
(tasks per state, oldest waiting age) are `sqlq metrics`'s (sqlq.web.metrics).

* ``sqlq_worker_tasks_total{queue,name,outcome}``: the tasks this worker finished with,
  by outcome, counted when the queue has answered its report: ``completed``,
  ``retried`` (failed, with attempts left: WAITING or AVAILABLE again), ``dead`` (failed
  on its last attempt, or NotRetryable), ``cancelled`` (asked to stop, and stopped),
  ``lost`` (its report or release was refused: the lease had run out, and the task is
  another lease's now), ``released`` (given back at shutdown, its attempt not
  counted) and ``abandoned`` (the worker stopped before it could report the outcome:
  the lease runs out, and the task is retried then).  A time limit's failure counts
  as ``retried`` or ``dead``; the handler's late result is then counted no more.
* ``sqlq_worker_transaction_seconds{queue}``: how long each transaction of the claim
  loop took (its reports and its claim, as one call: ``Queue.settle_and_claim``),
  waiting for the write lock included.  This is the claim latency the worker can
  measure: the time from a task being due to its claim would need the claim to return
  when each task became due, which it does not (and one more statement per claim is
  not worth it).
* ``sqlq_worker_handler_seconds{queue,name,outcome}``: how long handlers ran, by task
  name and outcome (``completed``, ``failed``, ``cancelled``, ``lost``: the report was
  refused, or ``late``: after the time limit).

Task names are labels (``""`` for none): the first ``MAX_NAMES`` task names seen get a
series each; names past them (producers that make names up, one per user or per day)
are counted under ``name="other"``, so that neither the worker's memory nor
Prometheus's series grow without bound.

Tasks *added* are no worker's to count: producers add them (any process, the CLI, the
dashboard, periodic ticks); their rate is the database's (`sqlq metrics`).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ..access import check_bind, check_token, token_matches
from ..errors import InvalidConfig
from ..install import pip_install

#: Task names with a series of their own, per worker (the first seen); see the docstring.
MAX_NAMES = 100
#: The label value of the names past MAX_NAMES.
OTHER_NAMES = "other"


class WorkerMetrics:
    """The histograms of one worker, and the HTTP server that serves them."""

    def __init__(
        self, queue: str, port: int, host: str = "127.0.0.1", token: str | None = None
    ) -> None:
        if not isinstance(host, str) or not host:
            raise InvalidConfig(f"metrics_host must be an address, not {host!r}")
        check_token(token)
        check_bind(
            host, token, "metrics_token; sqlq worker: --metrics-token, or SQLQ_METRICS_TOKEN"
        )
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise InvalidConfig(
                f"metrics_port needs prometheus-client: {pip_install('web')}"
            ) from None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidConfig(f"metrics_port must be a port number (0-65535), not {port!r}")
        self.queue, self.port, self.host, self.token = queue, port, host, token
        self.registry = CollectorRegistry(auto_describe=True)
        self._tasks = Counter(
            "sqlq_worker_tasks",
            "Tasks this worker finished with, by task name and outcome",
            ["queue", "name", "outcome"],
            registry=self.registry,
        )
        self._transactions = Histogram(
            "sqlq_worker_transaction_seconds",
            "Seconds each transaction of the claim loop took (reports and claim)",
            ["queue"],
            registry=self.registry,
        ).labels(queue)
        self._handlers = Histogram(
            "sqlq_worker_handler_seconds",
            "Seconds handlers ran, by task name and outcome",
            ["queue", "name", "outcome"],
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, float("inf")),
        )
        self._names: set[str] = set()
        self._server: Any = None

    def start(self) -> None:
        """Serve /metrics in a thread (``port`` 0: a free port, then ``self.port`` says
        which), asking every request for the token if there is one."""
        from prometheus_client import make_wsgi_app

        app = make_wsgi_app(self.registry)
        if self.token is not None:
            app = _guarded(app, self.token)
        server = _Server6 if ":" in self.host else _Server
        try:
            self._server = make_server(
                self.host.strip("[]"), self.port, app, server, handler_class=_Quiet
            )
        except OSError as exc:
            raise InvalidConfig(
                f"metrics on {self.host} port {self.port}: cannot serve there ({exc})"
            ) from exc
        self.port = self._server.server_port
        threading.Thread(
            target=self._server.serve_forever, name="sqlq-worker-metrics", daemon=True
        ).start()

    @property
    def url(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def transaction(self, seconds: float) -> None:
        self._transactions.observe(seconds)

    def handled(self, name: str | None, outcome: str, seconds: float) -> None:
        """A handler ran ``seconds``, and ended with ``outcome``."""
        self._handlers.labels(self.queue, self._label(name), outcome).observe(seconds)

    def counted(self, name: str | None, outcome: str) -> None:
        """The worker is done with a task of ``name``: its ``outcome`` (see the docstring)."""
        self._tasks.labels(self.queue, self._label(name), outcome).inc()

    def _label(self, name: str | None) -> str:
        """The label of a task name: its own for the first MAX_NAMES, then OTHER_NAMES."""
        label = name or ""
        if label not in self._names:
            if len(self._names) >= MAX_NAMES:
                return OTHER_NAMES
            self._names.add(label)
        return label


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the worker's exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line on stderr per scrape."""


Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _guarded(app: Wsgi, token: str) -> Wsgi:
    """``app`` for the requests that carry ``token`` (see sqlq.access); 401 for others."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1")  # (as sent: WSGI)
        if token_matches(given, token):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Basic realm="sqlq"')],
        )
        return [b"an access token is needed"]

    return guarded
