"""``/metrics``: what the database tells of its queues, in the Prometheus text format
(written by prometheus-client).

Read at each scrape, in one read snapshot without the write lock (Backend.overview):

* ``sqlq_tasks{queue,state}``: tasks per state; ``DEAD`` are the dead letters kept
  (redrive and purge take them away);
* ``sqlq_oldest_available_age_seconds{queue}``: how long the front of the line has
  waited (0 when nothing waits);
* ``sqlq_lease_overdue_seconds{queue}``: how long the most overdue lease has run past
  its deadline (0 when none has): a lease that ran out and that no call has released
  yet, its worker gone or stuck;
* ``sqlq_queue_paused{queue}``: 1 while the queue is paused;
* ``sqlq_workers{queue}``: the workers alive (the worker registry's rows not stale,
  see sqlq.registry), 0 for a queue with tasks and none;
* ``sqlq_wal_bytes``: the size of a SQLite database's ``-wal`` file.

The database keeps no running totals (completed, failed, expired per second): a
counter it kept would cost every call a write.  Rates come from the changes of
``sqlq_tasks`` between scrapes, as Prometheus's ``deriv`` gives them, as far as
purges do not take tasks away in between.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response

from ..backend import Backend
from ..contract import State
from ..registry import listed


class DatabaseCollector(Collector):
    """The metrics of one database, read at each collect()."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        found = self.backend.overview(with_names=False)
        tasks = GaugeMetricFamily(
            "sqlq_tasks", "Tasks per queue and state", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "sqlq_oldest_available_age_seconds",
            "Seconds the front of the queue's line has waited (0: nothing waits)",
            labels=["queue"],
        )
        overdue = GaugeMetricFamily(
            "sqlq_lease_overdue_seconds",
            "Seconds the most overdue lease has run past its deadline, not yet released (0: none)",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "sqlq_queue_paused", "1 while the queue is paused", labels=["queue"]
        )
        for queue, figures in sorted(found.items()):
            for state in [s.value for s in State] + sorted(set(figures.counts) - set(State)):
                tasks.add_metric([queue, state], figures.counts.get(state, 0))
            front, deadline = figures.available_since, figures.next_deadline
            oldest.add_metric([queue], 0.0 if front is None else max(0.0, now - front))
            overdue.add_metric([queue], 0.0 if deadline is None else max(0.0, now - deadline))
            paused.add_metric([queue], float(figures.paused))
        yield from (tasks, oldest, overdue, paused, self._workers(found, now))
        wal = self.backend.storage_facts().wal_bytes
        if wal is not None:
            yield GaugeMetricFamily("sqlq_wal_bytes", "Size of the SQLite -wal file", value=wal)

    def _workers(self, queues: Iterable[str], now: float) -> Metric:
        """sqlq_workers: the workers alive per queue (0 for a queue of ``queues`` without)."""
        alive = dict.fromkeys(queues, 0)
        at, rows = self.backend.workers()  # stale by the database's time, not this host's
        for worker in listed(rows, at):
            alive[worker.queue] = alive.get(worker.queue, 0) + (not worker.stale)
        workers = GaugeMetricFamily(
            "sqlq_workers", "Workers alive (not stale in the worker registry)", labels=["queue"]
        )
        for queue, count in sorted(alive.items()):
            workers.add_metric([queue], count)
        return workers


def endpoint(backend: Backend) -> Response:
    """The response of a scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(backend))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
