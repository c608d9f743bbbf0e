"""A worker's own Prometheus metrics: ``Worker(queue, handler, metrics_port=N)`` serves
them at ``http://127.0.0.1:N/metrics`` while it runs (prometheus-client: the ``web``
extra).

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

from typing import Any

from .errors import InvalidConfig

#: Task names with a series of their own, per worker (the first seen); see the docstring.
MAX_NAMES = 100
#: The label value of the names past MAX_NAMES.
OTHER_NAMES = "other"


class WorkerMetrics:
    """The histograms of one worker, and the HTTP server that serves them."""

    def __init__(self, queue: str, port: int, host: str = "127.0.0.1") -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise InvalidConfig(
                "metrics_port needs prometheus-client: pip install 'sqlq[web]'"
            ) from None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidConfig(f"metrics_port must be a port number (0-65535), not {port!r}")
        self.queue, self.port, self.host = queue, port, host
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
        """Serve /metrics (``port`` 0: a free port, then ``self.port`` says which)."""
        from prometheus_client import start_http_server

        try:
            self._server, _thread = start_http_server(self.port, self.host, self.registry)
        except OSError as exc:
            raise InvalidConfig(f"metrics_port {self.port}: cannot serve on it ({exc})") from exc
        self.port = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

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
