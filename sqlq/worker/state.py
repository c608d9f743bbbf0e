"""The state the parts of a Worker share (:class:`WorkerState`), and what each does
with an error a worker outlives (``_log_busy``)."""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..durable import Queue
from ..errors import SchemaChanged
from ..records import Lease
from ..schedule import Schedule
from ..tasks import Tasks
from .clock import Clock
from .executors import Executor
from .jobs import Running
from .metrics import WorkerMetrics
from .monitor import Monitor
from .stats import WorkerStats
from .tracing import TaskTracer

#: Pause before a queue call that raised Busy is tried again, in seconds.
BUSY_PAUSE = 0.2

#: Errors a worker outlives (sqlq.errors.TRANSIENT): logged, and the call tried again
#: after BUSY_PAUSE; the tasks are safe meanwhile (leases that run out are retried).

#: Seconds between two warnings about the same transient error.
REPEAT_WARNING = 10.0


class WorkerState:
    """What the parts of a Worker share, set by ``Worker.__init__`` (sqlq.worker.lifecycle).

    The settings are read-only once made.  Everything private is guarded by ``_cond``
    (an RLock, because a signal handler calling stop() runs in the main thread,
    which may hold it); the monitor (sqlq.worker.monitor) shares that lock."""

    queue: Queue
    handler: Callable[[Any], object] | Tasks
    concurrency: int
    #: The most leases held beyond ``concurrency`` (see Batches._room).
    prefetch: int
    heartbeat: float
    time_limit: float | None
    grace: float
    poll_min: float
    poll_max: float
    with_lease: bool
    clock: Clock
    summary_every: float | None
    log: logging.Logger
    #: This worker's id in the worker registry (sqlq.registry).
    worker_id: str
    schedules: list[Schedule]
    metrics: WorkerMetrics | None
    tracer: TaskTracer | None

    _poll_max_given: bool
    _cancel_announcements: Callable[[], None] | None
    _announced: bool
    _run: Callable[[Lease], object]
    _lock: threading.RLock
    _cond: threading.Condition
    _stats: WorkerStats
    _running: dict[int, Running]
    _held: int
    _backlog: deque[Running]
    _active: int
    _overdue: int
    _runners: set[int]
    _work: threading.Condition
    _idle: float | None
    _mean: float | None
    _outcomes_since: float | None
    _outcomes: list[tuple[Running, BaseException | None, bool]]
    _stopping: bool
    _stop_at: float | None
    _fatal: SchemaChanged | None
    _hurry: bool
    _returned: bool
    _warned: dict[str, float]
    _started: bool
    _executor: Executor[Running]
    _monitor: Monitor
    _until: str | None
    _drain_check: float
    _due_at: float | None
    _ticks: list[float]

    def _log_busy(self, exc: Exception) -> None:
        """A transient error: a warning, then at most one a REPEAT_WARNING seconds for
        the same kind of error (a full disk or a wrong clock can last a while; the
        call is retried every BUSY_PAUSE)."""
        kind = type(exc).__name__
        seen = self.clock.monotonic()
        level = logging.DEBUG
        if seen - self._warned.get(kind, -math.inf) >= REPEAT_WARNING:
            self._warned[kind] = seen
            level = logging.WARNING
        self.log.log(
            level, "queue %r: %s (%s); retrying in %gs", self.queue.queue, kind, exc, BUSY_PAUSE
        )


class _Busy:
    """A queue call raised Busy (a sentinel, distinct from every call's answers)."""


_BUSY = _Busy()
