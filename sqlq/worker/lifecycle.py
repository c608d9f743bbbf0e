"""The :class:`Worker`: its settings, its public face (``run``, ``stop``, ``halt``,
``stats``), its signals, and the threads it starts and stops; its parts are the classes it
is made of (claims, shutdown, outcomes, wakeups, batches, schedules)."""

from __future__ import annotations

import logging
import math
import secrets
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import FrameType
from typing import Any

from ..contract import (
    MAX_LEASE_SECONDS,
)
from ..durable import Queue
from ..errors import InvalidConfig, SchemaChanged
from ..records import Lease
from ..schedule import Schedule
from ..tasks import Tasks, runner
from .batches import BATCH
from .claims import Claims
from .clock import Clock, SystemClock
from .executors import Executor
from .metrics import WorkerMetrics
from .monitor import Monitor
from .schedules import _schedules
from .stats import WorkerStats
from .tracing import TaskTracer
from .wakeups import POLL_MAX

_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class Worker(Claims):
    """Runs ``handler`` on the tasks of ``queue``; see the module docstring.

    ``handler`` gets the task's payload (or, with ``with_lease=True``, the whole
    :class:`sqlq.Lease`); a :class:`sqlq.Tasks` registry instead runs the function
    named by each task, with the payload as keyword arguments (see sqlq.tasks).
    Its return value is ignored (an awaitable is awaited first: async handlers
    run on the worker's event loop); an exception fails the task (NotRetryable:
    DEAD at once).  A handler that cannot take one argument is refused here.  A
    Worker runs once: call ``run`` a single time.  ``clock`` (a :class:`Clock`) is
    the time it measures heartbeats, time limits, the grace period and idle waits
    with (the queue keeps its own clock for leases).  ``summary_every`` (seconds
    of that clock; None or 0, the default: never) is how often it logs a summary
    line (``sqlq worker`` does every 60 s).  ``schedules`` are periodic tasks the
    worker adds (see the module docstring), besides a registry's own.
    ``metrics_port``: serve the worker's totals (tasks by outcome) and histograms
    (transaction and handler times) at ``http://METRICS_HOST:PORT/metrics`` while it
    runs (``metrics_host`` 127.0.0.1 by default; any address but a loopback one needs
    ``metrics_token``, which every request must then carry: see sqlq.worker.metrics).
    ``tracing``: an OpenTelemetry span of each task run, from the global tracer
    provider (see sqlq.worker.tracing).
    """

    def __init__(
        self,
        queue: Queue,
        handler: Callable[[Any], object] | Tasks,
        *,
        concurrency: int = 1,
        prefetch: int | None = None,
        heartbeat: float | None = None,
        time_limit: float | None = None,
        grace: float = 30.0,
        poll_min: float = 0.005,
        poll_max: float | None = None,
        with_lease: bool = False,
        logger: logging.Logger | None = None,
        clock: Clock | None = None,
        summary_every: float | None = None,
        schedules: Iterable[Schedule] = (),
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_token: str | None = None,
        tracing: bool = False,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidConfig(f"concurrency must be an int of at least 1, got {concurrency!r}")
        if not isinstance(queue, Queue):
            raise InvalidConfig(
                f"a Worker takes a sqlq.Queue (an open one, not a path), not {type(queue).__name__}"
            )
        lease_seconds = float(queue.lease_seconds)
        if heartbeat is None:
            if lease_seconds <= 0:
                raise InvalidConfig(
                    "the queue's lease_seconds is 0, so leases cannot be kept alive; "
                    "open the queue with a positive lease_seconds"
                )
            heartbeat = lease_seconds / 3
        if prefetch is None:
            prefetch = max(BATCH - concurrency, concurrency)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise InvalidConfig(f"prefetch must be an int of at least 0, got {prefetch!r}")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        #: The most leases held beyond ``concurrency`` (see _room).
        self.prefetch = prefetch
        self.heartbeat = _positive(heartbeat, "heartbeat")
        self.time_limit = None if time_limit is None else _positive(time_limit, "time_limit")
        self.grace = _positive(grace, "grace", zero=True)
        self.poll_min = _positive(poll_min, "poll_min")
        self._poll_max_given = poll_max is not None
        self.poll_max = _positive(POLL_MAX if poll_max is None else poll_max, "poll_max")
        self._cancel_announcements = None
        self._announced = False
        if self.poll_max < self.poll_min:
            raise InvalidConfig(f"poll_max ({poll_max}) must not be below poll_min ({poll_min})")
        if not isinstance(with_lease, bool):
            raise InvalidConfig(f"with_lease must be a bool, not {type(with_lease).__name__}")
        self.with_lease = with_lease
        self._run = runner(handler, with_lease)
        if clock is not None and not (
            callable(getattr(clock, "monotonic", None)) and callable(getattr(clock, "wait", None))
        ):
            raise InvalidConfig(f"clock must have monotonic() and wait(), not {clock!r}")
        self.clock = SystemClock() if clock is None else clock
        self.summary_every = (
            None if not summary_every else _positive(summary_every, "summary_every")
        )
        self.log = logger if logger is not None else logging.getLogger("sqlq.worker")
        if self.heartbeat >= lease_seconds:
            self.log.warning(
                "heartbeat (%gs) is not shorter than lease_seconds (%gs): "
                "leases will run out between heartbeats",
                self.heartbeat,
                lease_seconds,
            )

        # Everything below is guarded by _cond.  An RLock, because a signal
        # handler calling stop() runs in the main thread, which may hold it.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # the claim loop's and the drain's waits
        self._stats = WorkerStats()
        self._running = {}  # by lease token
        # Leases held or being claimed.  The one rule that keeps the leases held at
        # most concurrency + prefetch: a lease is only asked for once counted here
        # (_settle asks for the room _room finds and counts it before the call; the
        # outcomes it reports, which the same transaction ends before it claims,
        # are uncounted once it has committed).
        self._held = 0
        # Leases claimed whose handlers have not started, in order; runners take them.
        self._backlog = deque()
        self._active = 0  # handlers running (threads and coroutines): <= concurrency
        self._overdue = 0  # of which past their time limit (slots they may never free)
        self._runners = set()  # the runner threads' idents
        self._work = threading.Condition(self._lock)  # the runners' waits for a job
        self._idle = None  # the claim loop's current idle wait, if idle
        self._mean = None  # handlers' mean duration (the worker's clock)
        self._outcomes_since = None  # when the oldest outcome pending came
        # Outcomes of handlers that returned, not yet reported: (task, error, whether
        # the handler returned after its time limit).
        self._outcomes = []
        self._stopping = False
        self._stop_at = None
        self._fatal = None  # met by the heartbeat thread (halt)
        self._hurry = False  # skip what is left of the grace period
        self._returned = False  # run() is returning: no more queue calls
        self._warned = {}  # transient error kind -> last warning
        self._started = False
        self._executor = Executor(
            # The handler's call on a lease (an awaitable, if it is async).
            self._run if tracing is not True else self._traced,
            self._finished,
            name=f"sqlq-worker-{queue.queue}",
            log=self.log,
        )
        # Heartbeats, time limits, the summary, the registry; under the worker's lock.
        self._monitor = Monitor(self, self._lock)
        #: This worker's id in the worker registry (sqlq.registry).
        self.worker_id = secrets.token_hex(8)
        self._until = None  # run() returns when "idle", "drained", or stopped
        self._drain_check = -math.inf  # the worker's clock: when _idle_end next reads counts
        self._due_at = None  # the worker's clock: when a task falls due next
        self.schedules = _schedules(handler, schedules, queue.max_payload_bytes)
        if metrics_port is None and (metrics_host != "127.0.0.1" or metrics_token is not None):
            raise InvalidConfig("metrics_host and metrics_token serve metrics: give metrics_port")
        self.metrics = (
            None
            if metrics_port is None
            else WorkerMetrics(queue.queue, metrics_port, metrics_host, metrics_token)
        )
        if not isinstance(tracing, bool):
            raise InvalidConfig(f"tracing must be a bool, not {type(tracing).__name__}")
        self.tracer = TaskTracer(queue.queue) if tracing else None
        # When each schedule is due next, by the worker's clock (-inf: at once).
        self._ticks = [-math.inf] * len(self.schedules)

    # --- the public face ----------------------------------------------------------

    def _traced(self, lease: Lease) -> object:
        """The handler's call on a lease, in the job's own context (see Executor), with
        the lease's span as the current one."""
        assert self.tracer is not None
        self.tracer.enter(lease)
        return self._run(lease)

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far."""
        with self._cond:
            return replace(self._stats)

    def stop(self) -> None:
        """Ask ``run`` to stop: no more claims, running handlers get ``grace`` seconds.

        Thread-safe, and safe to call before ``run`` starts or more than once.
        """
        with self._cond:
            first = not self._stopping
            if first:
                self._stopping = True
                self._stop_at = self.clock.monotonic()
            running = self._started and not self._returned
            self._cond.notify_all()
            self._work.notify_all()  # the runners start no more jobs
        if first and running:  # the queue is the caller's again once run() has returned
            self.queue.interrupt_waits(self.grace)

    def halt(self, error: SchemaChanged) -> None:
        """Stop as ``stop`` does, because of ``error`` (the database was migrated under
        this process, met by a heartbeat): logged once, and ``run`` raises it once
        its handlers are done."""
        with self._cond:
            first = self._fatal is None
            if first:
                self._fatal = error
        if first:
            self.log.error("%s; stopping", error)
        self.stop()

    def run(
        self,
        *,
        stop_when_idle: bool = False,
        stop_when_drained: bool = False,
        install_signal_handlers: bool = True,
    ) -> WorkerStats:
        """Claim and handle tasks until stopped; return what was done.

        With ``stop_when_idle``, also return once a claim finds nothing, no
        handler is running and ``ready()`` says nothing is waiting; the last log
        line then says what is left behind (leases other workers hold, WAITING
        tasks, AVAILABLE ones a pause or their groups' limits hold back).
        ``stop_when_drained`` waits for those too: it returns once the queue has
        nothing AVAILABLE, RESERVED or WAITING.  SIGTERM and SIGINT
        handlers are installed only in the main thread and only for the
        duration of the call.
        """
        with self._cond:
            if self._started:
                raise RuntimeError("a Worker runs once; make a new one")
            self._started = True
            self._until = "drained" if stop_when_drained else "idle" if stop_when_idle else None
        previous: dict[int, _SignalHandler] = {}
        idle = False
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self._listen_for_announcements()
            self._start_threads()
            if self.metrics is not None:
                self.metrics.start()
            self.log.info(
                "worker started: queue %r, concurrency %d, lease %gs, heartbeat %gs, "
                "time limit %s, grace %gs%s%s",
                self.queue.queue,
                self.concurrency,
                self.queue.lease_seconds,
                self.heartbeat,
                "none" if self.time_limit is None else f"{self.time_limit:g}s",
                self.grace,
                f"; tasks {', '.join(sorted(self.handler))}"
                if isinstance(self.handler, Tasks)
                else "",
                "" if self.metrics is None else f"; metrics on {self.metrics.url}",
            )
            try:
                idle = self._claim_loop()
            except BaseException as exc:
                if isinstance(exc, SchemaChanged):  # no traceback: the message says it all
                    self.halt(exc)
                elif not isinstance(exc, KeyboardInterrupt):
                    self.log.error("worker error; stopping", exc_info=True)
                self.stop()
                if isinstance(exc, KeyboardInterrupt):  # not through our handler: no grace
                    self._hurry_up()
                self._drain()
                raise
            self._drain()
            if self._fatal is not None:  # (met by the heartbeat thread)
                raise self._fatal
        finally:
            if self._cancel_announcements is not None:
                self._cancel_announcements()
            self._stop_threads()
            if self.metrics is not None:
                self.metrics.stop()
            self._forget()  # (its wait for the lock is bounded by the grace, if stopped)
            self.queue.interrupt_waits(None)
            stats = self.stats
            self.log.info(
                "worker stopped: %d claimed, %d completed, %d failed, %d lost, %d released, "
                "%d timed out (%d dead), %d cancelled; %d commits%s",
                stats.claimed,
                stats.completed,
                stats.failed,
                stats.lost,
                stats.released,
                stats.timed_out,
                stats.dead,
                stats.cancelled,
                stats.commits,
                self._left_behind() if idle else "",
            )
            # Last: a signal that comes after this meets the previous handler.
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        return stats

    def _forget(self) -> None:
        """Delete the worker's row of the registry (it stops cleanly); if that fails
        (logged), the row goes stale and is deleted later (see sqlq.registry)."""
        try:
            self.queue.forget_worker(self.worker_id)
        except Exception as exc:
            self.log.warning(
                "the worker's row of the registry could not be deleted (%s: %s); it shows "
                "as stale until it is pruned",
                type(exc).__name__,
                exc,
            )

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        with self._cond:
            again = self._stopping
        if again:
            self.log.warning("%s again: giving running tasks back now", name)
            self._hurry_up()
        else:
            self.log.info("%s: stopping; running handlers have %gs to finish", name, self.grace)
            self.stop()

    def _start_threads(self) -> None:
        self._monitor.start(self.clock.monotonic(), WorkerStats())
        for i in range(self.concurrency):
            name = f"sqlq-worker-{self.queue.queue}-{i}"
            threading.Thread(target=self._runner, name=name, daemon=True).start()

    def _stop_threads(self) -> None:
        with self._cond:
            self._returned = True
            self._cond.notify_all()
            self._work.notify_all()
            self._monitor.end()
        self._monitor.join()
        self._executor.shutdown()


def _positive(value: object, what: str, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not value <= MAX_LEASE_SECONDS or value < 0 or (value == 0 and not zero):
        bound = "from 0" if zero else "more than 0"
        raise InvalidConfig(
            f"{what} must be a number of seconds {bound} to {MAX_LEASE_SECONDS:g}, got {value!r}"
        )
    return float(value)
