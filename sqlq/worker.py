"""Workers: take tasks from a Queue, run a handler on each, report the outcome.

``Worker(queue, handler).run()`` is the loop every consumer of a queue needs:

* **Claim and report: batches.**  One claim loop (the thread that calls
  ``run``) takes leases and hands them, as a batch, to ``concurrency`` runner
  threads, which take them from a shared backlog one after the other: no
  thread hand-off per task, and the claim loop sleeps until the backlog runs
  low (fewer jobs left than runners) with outcomes to report or room to claim.
  It then reports every outcome pending and claims for the room there is in
  one transaction (``queue.settle_and_claim``: completions, failures with the
  exception text, then the claim; one commit).  Outcomes that come while that
  commit is in flight go with the next, so the tasks per commit grow with the
  load (up to ``concurrency + prefetch``, 64 by default) and are one when a
  lone task comes to an idle worker: nothing waits for a batch to fill, and an
  outcome waits for the rest of its batch REPORT_WAIT at most (a handler that
  takes far longer than the others holds up no report).  An outcome is
  acknowledged (counted and logged) only once its transaction has committed;
  one that met ``Busy`` goes with the next call.  The queue's retry policy
  decides what happens to a failed task.  Every report carries the lease's
  token, so a worker whose lease ran out can never complete or fail a task
  another worker now holds: its report is refused and counted as *lost*.
* **Leases are not threads: a bounded prefetch.**  ``concurrency`` handlers run
  at once (threads and coroutines together); the worker holds at most
  ``concurrency + prefetch`` leases, those beyond the running ones waiting in
  the backlog.  A lease is only asked for once counted (see _room), and the
  transaction that ends the outcomes reported is the one that claims anew.  The
  prefetch is cut to what the handlers get through in PREFETCH_HORIZON at their
  mean duration so far, and is none before the first handler has returned:
  short tasks go up to 64 a transaction, long ones are not hoarded while another
  worker could run them.  Leases waiting in the backlog are heartbeated as the
  running ones are, a lease found lost there is not run, and at a stop they
  are released at once (the attempt not counted).  So is the whole backlog
  once its oldest lease has waited BACKLOG_WAIT (sqlq.monitor; a handler took
  far longer than the mean, or hangs) or a handler ran past its time limit:
  other workers run them, and the prefetch is then cut as if handlers took
  that long (a slot past its time limit counts for none until it is free).  A
  lease that arrives once the worker is stopping is released at once too, so
  none is left to run out.
* **Results and progress.**  What a handler returns (a registered task's
  function too; awaited, for an async one) is stored as its task's result by
  the completion that reports it (``Queue.result``).  A value that cannot be
  stored (not JSON, too large) fails the task with NotRetryable instead: DEAD
  at once, as it would return the same again.  A handler reports progress with
  ``current_task().progress(value, message)``: the job's own context (see
  sqlq.executors) tells it its queue and lease.
* **Heartbeats.**  One monitor thread extends the lease of every task running or prefetched
  every ``heartbeat`` seconds (default ``lease_seconds / 3``), so a handler may
  run far longer than ``lease_seconds`` while its worker lives.  A heartbeat
  that finds the lease gone (``extend`` returned None: the lease ran out, for
  instance after the process was stopped for longer than a lease) is logged as
  a warning; that task's result will be refused.
* **The worker registry.**  The same thread writes the worker's row of the
  registry (``queue.beat_worker``: its host, pid, concurrency and the leases it
  holds) when it starts and then every ``heartbeat`` seconds, idle or busy: one
  transaction per interval, none per task.  ``run`` deletes the row when it
  returns (``queue.forget_worker``); a worker killed leaves it to go stale (see
  sqlq.registry).  ``worker_id`` is its id there.
* **Stop requests.**  A heartbeat also learns whether ``queue.cancel`` asked
  the task to stop; from then on :func:`sqlq.stop_requested` says True in its
  handler, which should stop by raising: the failure it reports ends the task
  CANCELLED (not retried; see sqlq.contract), counted as ``cancelled``.  A
  prefetched task whose stop a heartbeat learnt is never started: its lease is
  released instead, which ends it CANCELLED.
* **Idle polling.**  With nothing to claim, the worker asks ``queue.ready()``
  (a read that takes no write lock) after waits that double from ``poll_min``
  to ``poll_max``, and claims again only when it says yes.  A new task is thus
  picked up within about ``poll_max`` and an idle worker costs almost no CPU.
  When ``ready()`` says no, ``queue.next_due()`` (a read too) tells when a task
  held back by time falls due (a limited group's next rate slot, a lease running
  out, a WAITING task), and the idle wait ends then at the latest: a rate-limited
  group starts its tasks at its rate, not at the pace of the polls.
  Where the database announces new tasks (PostgreSQL's LISTEN/NOTIFY, see
  ``Queue.on_new_tasks``) an idle worker claims as soon as one is announced,
  and polls only for what nobody announces (a retry delay or a lease running
  out), by default every ``PUSHED_POLL_MAX`` seconds at most.  A paused queue
  (``queue.pause()``) is idle in the same way: ``ready()`` says False until
  it is resumed (announced where the database announces tasks).
* **Time limits.**  A handler that runs longer than ``time_limit`` seconds is
  no longer heartbeated and its task is failed at once with the error "time
  limit of Xs exceeded", so it is retried (or goes DEAD) by the queue's policy:
  the attempt counts.  An async handler is then cancelled, and its slot is
  free again once it has ended.  Python cannot kill a thread, so a sync handler
  keeps its thread and its slot until it returns; its late complete or fail is
  then refused by the token (the task already moved on) and only logged.  Sync
  handlers that can hang should have timeouts of their own.
* **Stopping.**  ``stop()`` (thread-safe), SIGTERM or SIGINT (when ``run`` is
  called in the main thread) stop the claiming; running handlers get ``grace``
  seconds to finish (the claim loop goes on reporting their outcomes).  Tasks
  whose handlers are still running after that are **released** with
  ``queue.release(task, token)``: they go back to the end of the line
  *without counting the attempt* (the worker gave up on them; the task did
  not fail), and ``run`` returns; async handlers still running are cancelled
  (their CancelledError is no failure).  A second signal skips
  what is left of the grace period.  Handler threads are daemon threads, so a
  handler that never returns does not keep the process alive; its late result
  is ignored.  The grace period bounds every wait for a lock too
  (``queue.interrupt_waits``): a claim waiting for a write lock that another
  connection holds gives up when the grace ends; the releases and reports
  still pending then get RELEASE_WAIT more seconds, and a lease that cannot be
  released within them runs out and its task is retried then (logged).
* **Async handlers.**  A handler whose call returns an awaitable (an ``async
  def`` function, or a sync one that calls it, such as a router by task name)
  is awaited on the worker's event loop, one thread of its own: decided call
  by call, so sync and async functions can share a worker.  Heartbeats, time
  limits, stopping and outcomes are the same as for threads, and at most
  ``concurrency`` tasks run at once, threads and coroutines together (a runner
  thread that hands a coroutine to the loop goes on to its next job while a
  slot is free: many coroutines at once on one loop).  A
  blocking call inside an async handler blocks the whole loop: await instead
  (``asyncio.to_thread``, and :class:`sqlq.AsyncQueue` for the queue).  The
  threads and the loop are sqlq.executors.
* **Periodic tasks.**  ``schedules`` (:class:`sqlq.Schedule`), and those a
  :class:`sqlq.Tasks` registry declares with ``@tasks.periodic``, are ticked by
  the claim loop: ``queue.tick(schedule)`` adds the tasks of the ticks due (one
  per tick, however many workers tick the same schedule; see sqlq.schedule),
  once when the worker starts and then whenever the next tick comes by the
  queue's time (waited for with the worker's ``clock``).  No separate process
  to run: every worker of the queue ticks them, and the queue refuses the
  duplicates.
* **Time.**  ``clock`` (a :class:`Clock`) gives the worker's time and waits:
  :class:`SystemClock` by default, ``sqlq.testing.ManualClock`` in tests, which
  then need no sleeps.
* **Errors.**  ``Busy`` from a queue call (the write lock stayed taken longer
  than the queue's busy_timeout), and the errors that may pass (``StorageFull``,
  ``StorageIOError``, ``Unavailable``: a database server lost or restarting,
  ``ClockSkew``: see TRANSIENT) are logged and the call retried after a short
  pause (on a new connection, for a server).  Any other unexpected error of the
  claim loop is logged with its traceback; running handlers get their grace
  period and ``run`` re-raises it.

* **Logs.**  The ``sqlq.worker`` logger, one event a line: ``task completed
  task_id=... attempt=1 token=42 duration=0.003s outcome=COMPLETED``, with the
  same values in the record's ``extra`` (attributes of the record, for a JSON
  formatter).  Claims and completions are DEBUG (a line per task would flood
  INFO at thousands a second); failures, "task dead" (the last attempt failed),
  lost leases and releases are WARNING, since a handler's failure is not the
  worker's (its own errors are ERROR).  ``task_fields`` is what identifies a
  task in them.  Every ``summary_every`` seconds of the worker's clock one INFO
  line sums up the outcomes since the last one, the tasks per second, the
  backlog and the age of the oldest AVAILABLE task, read by ``Queue.snapshot``
  (no write lock).
* **Running dry.**  ``run(stop_when_idle=True)`` returns once there is nothing
  to claim and says in its last line what it leaves behind (leases of other
  workers, WAITING tasks, AVAILABLE ones a pause or limits hold back);
  ``stop_when_drained=True`` waits for those too.

Delivery is at least once: a worker can finish a handler and die before it
reports, and the task then runs again.  Handlers must be idempotent.

``serve(db, "package.module:function", ...)`` is what ``sqlq worker`` runs: it
opens the queue, resolves the handler, sets up logging and runs a Worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import os
import secrets
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol, TypeVar

from . import payload as payloads
from .contract import (
    MAX_BATCH,
    MAX_LEASE_SECONDS,
    Number,
    State,
    check_result,
    describe_error,
)
from .durable import Queue
from .errors import TRANSIENT, InvalidArgument, InvalidConfig, NotRetryable, SchemaChanged
from .events import event, task_fields
from .executors import Executor, current_job
from .monitor import ACTIVE, HELD, Monitor, Phase, Running
from .records import Lease
from .schedule import Schedule, check_schedule
from .tasks import Tasks, failure, runner
from .worker_metrics import WorkerMetrics
from .worker_tracing import TaskTracer

__all__ = [
    "Clock",
    "SystemClock",
    "TaskContext",
    "Worker",
    "WorkerStats",
    "current_task",
    "exit_past_lingering_threads",
    "resolve_target",
    "serve",
    "task_fields",
]

T = TypeVar("T")


@dataclass(frozen=True)
class TaskContext:
    """What a handler that a Worker runs can reach of its task: ``current_task()``."""

    queue: Queue
    lease: Lease

    def progress(self, value: Number | None = None, message: str | None = None) -> bool:
        """Report the task's progress (``Queue.progress`` under this lease): False once
        the lease is lost.  One queue call: report at a human pace, not per item."""
        return self.queue.progress(self.lease.task_id, self.lease.token, value, message)


def current_task() -> TaskContext:
    """The task of the handler that calls it (sync or async), while a Worker runs it;
    InvalidArgument anywhere else.  Made when asked, from the job the handler runs
    (sqlq.executors), not for every task."""
    job = current_job()
    if not isinstance(job, Running) or job.queue is None:
        raise InvalidArgument("current_task() is for a handler that a sqlq.Worker runs")
    return TaskContext(job.queue, job.lease)


#: Leases a worker holds at most, by default, when its handlers are quick: concurrency
#: plus a prefetch of ``max(BATCH - concurrency, concurrency)``, so that a deep queue
#: of short tasks is claimed and reported about BATCH a transaction.  64, not 32: at 8
#: processes a transaction's fixed cost (SQLite re-reads the pages other writers changed)
#: made 32 a transaction cost 1.11-1.17x the CPU per task of 64 (bench/RESULTS.md,
#: issue 24, 2026-12-08), with no more hoarding of long tasks.
BATCH = 64
#: Seconds a prefetched lease should wait at most for a handler: the prefetch is cut
#: to what the handlers get through in that time by their mean duration.
PREFETCH_HORIZON = 0.05
#: Weight of a handler's duration in the mean the prefetch is cut by.
DURATION_WEIGHT = 0.2
#: Seconds an outcome waits at most for the rest of its batch (a handler that takes
#: far longer than the others holds up no report).
REPORT_WAIT = PREFETCH_HORIZON

#: Pause before a queue call that raised Busy is tried again, in seconds.
BUSY_PAUSE = 0.2

#: Errors a worker outlives (sqlq.errors.TRANSIENT): logged, and the call tried again
#: after BUSY_PAUSE; the tasks are safe meanwhile (leases that run out are retried).

#: The longest idle pause between two ``ready()`` polls: where nothing announces new
#: tasks, and where the queue announces them (then only retry delays and leases
#: that run out are found by polling).
POLL_MAX = 0.04
PUSHED_POLL_MAX = 1.0
#: Seconds between two warnings about the same transient error.
REPEAT_WARNING = 10.0
#: Longest wait of the thread that calls ``run`` before it looks for a stop request.
SIGNAL_CHECK = 0.1
#: Seconds the releases and reports still pending when the grace period ends may
#: wait for the write lock (another worker's turn, say); then they give up.
RELEASE_WAIT = 1.0
#: Seconds between two reads of the queue's counts by a worker that waits, idle,
#: for the queue to be drained (stop_when_drained).
DRAIN_CHECK = 1.0
#: Format of the log lines ``serve`` writes to stderr when logging is not configured.
LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"

_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class Clock(Protocol):
    """What a Worker measures time and waits with."""

    def monotonic(self) -> float:
        """Seconds from some start; never goes back."""
        ...

    def wait(self, cond: threading.Condition, until: float | None) -> None:
        """Wait on ``cond`` (held by the caller) until it is notified or ``monotonic()``
        reaches ``until`` (None: no time limit).  It may return sooner: callers
        check again what they wait for."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, and waits that last at most SIGNAL_CHECK
    (a signal delivered to another thread runs its Python handler only once the
    main thread runs Python code again)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, cond: threading.Condition, until: float | None) -> None:
        left = SIGNAL_CHECK if until is None else min(until - time.monotonic(), SIGNAL_CHECK)
        if left > 0:
            cond.wait(left)


@dataclass
class WorkerStats:
    """What a worker did with the leases it claimed.

    Once ``run`` has returned, every claimed task is in exactly one of the other
    six counts, unless reporting it raised an unexpected error or was still
    retrying Busy at shutdown (both logged; its lease then runs out).
    """

    #: Leases claimed.
    claimed: int = 0
    #: The handler returned and ``complete`` accepted it.
    completed: int = 0
    #: The handler raised and ``fail`` accepted it (retried later, or DEAD).
    failed: int = 0
    #: ``complete``/``fail``/``release`` was refused: the lease had been lost.
    lost: int = 0
    #: Given back at shutdown, its attempt not counted.
    released: int = 0
    #: Failed by the worker because the handler ran past ``time_limit``.
    timed_out: int = 0
    #: Asked to stop (``queue.cancel``) and ended by its handler short of completing:
    #: CANCELLED.
    cancelled: int = 0
    #: Of the failed and timed out, the tasks that used their last attempt and are
    #: DEAD now.  Part of those counts, so left out of comparisons.
    dead: int = field(default=0, compare=False)
    #: Transactions of the claim loop (``settle_and_claim`` calls that committed):
    #: each reported the outcomes pending and claimed for the room there was, so
    #: ``(completed + failed) / commits`` is about the tasks per commit.  A
    #: measure, not an outcome: left out of comparisons.
    commits: int = field(default=0, compare=False)


class Worker:
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
    ``metrics_token``, which every request must then carry: see sqlq.worker_metrics).
    ``tracing``: an OpenTelemetry span of each task run, from the global tracer
    provider (see sqlq.worker_tracing).
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
        self._cancel_announcements: Callable[[], None] | None = None
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
        self.clock: Clock = SystemClock() if clock is None else clock
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
        self._running: dict[int, Running] = {}  # by lease token
        # Leases held or being claimed.  The one rule that keeps the leases held at
        # most concurrency + prefetch: a lease is only asked for once counted here
        # (_settle asks for the room _room finds and counts it before the call; the
        # outcomes it reports, which the same transaction ends before it claims,
        # are uncounted once it has committed).
        self._held = 0
        # Leases claimed whose handlers have not started, in order; runners take them.
        self._backlog: deque[Running] = deque()
        self._active = 0  # handlers running (threads and coroutines): <= concurrency
        self._overdue = 0  # of which past their time limit (slots they may never free)
        self._runners: set[int] = set()  # the runner threads' idents
        self._work = threading.Condition(self._lock)  # the runners' waits for a job
        self._idle: float | None = None  # the claim loop's current idle wait, if idle
        self._mean: float | None = None  # handlers' mean duration (the worker's clock)
        self._outcomes_since: float | None = None  # when the oldest outcome pending came
        # Outcomes of handlers that returned, not yet reported: (task, error, whether
        # the handler returned after its time limit).
        self._outcomes: list[tuple[Running, BaseException | None, bool]] = []
        self._stopping = False
        self._stop_at: float | None = None
        self._fatal: SchemaChanged | None = None  # met by the heartbeat thread (halt)
        self._hurry = False  # skip what is left of the grace period
        self._returned = False  # run() is returning: no more queue calls
        self._warned: dict[str, float] = {}  # transient error kind -> last warning
        self._started = False
        self._executor = Executor(
            # The handler's call on a lease (an awaitable, if it is async).
            self._run if tracing is not True else self._traced,
            self._finished,
            name=f"sqlq-worker-{queue.queue}",
            log=self.log,
        )
        self._monitor = Monitor(self)  # heartbeats, time limits, the summary, the registry
        #: This worker's id in the worker registry (sqlq.registry).
        self.worker_id = secrets.token_hex(8)
        self._until: str | None = None  # run() returns when "idle", "drained", or stopped
        self._drain_check = -math.inf  # the worker's clock: when _idle_end next reads counts
        self._due_at: float | None = None  # the worker's clock: when a task falls due next
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

    # --- the claim loop -------------------------------------------------------------

    def _claim_loop(self) -> bool:
        """Claim and report until stopped (False) or idle as run() was asked (True).

        It sleeps while the runners have enough to do, and is woken when their
        backlog runs low with outcomes to report or room to claim (see _turn_due):
        once a batch, not once a task."""
        while True:
            if self._ticks and self._tick_schedules():
                self._idle = None  # claim the tasks just added at once
            with self._cond:
                while (
                    not self._stopping
                    and not self._turn_due(len(self._backlog))
                    and not self._tick_due()
                ):
                    self._wait(self._next_wake())
                if self._stopping:
                    return False  # _drain reports what is left
                reporting = bool(self._outcomes)
                idle = self._idle
            if idle is not None and not reporting:
                woken = self._pause(self._until_tick(self._until_due(idle)), self._woken)
                if woken and not self._take_announcement():
                    continue  # stopping, or outcomes to report
                if not woken:
                    self._idle = min(idle * 2, self.poll_max)
                if not woken and not self._ready():
                    if self._in_flight() == 0 and self._idle_end():
                        return True
                    continue
            short = self._settle(claim=True)
            if isinstance(short, _Busy):
                self._wait_for_stop(BUSY_PAUSE)
                continue
            if not short:
                self._idle = None
            elif (
                self._until is not None
                and self._in_flight() == 0
                and not self._ready()
                and self._idle_end()
            ):
                return True
            elif self._idle is None:
                self._idle = self.poll_min

    def _turn_due(self, waiting: int, now: float | None = None) -> bool:
        """Is it the claim loop's turn, with ``waiting`` jobs in the backlog (holding
        _cond)?  When the backlog is empty and there are outcomes to report or room
        to claim (an idle worker then waits for tasks), or when it runs low (fewer
        jobs than handlers) and there is room: the runners run what is left while
        the claim is in flight; or when an outcome has waited REPORT_WAIT (by ``now``,
        the worker's clock, if given)."""
        if waiting == 0:
            return bool(self._outcomes) or self._room(len(self._outcomes)) > 0
        if self._report_due(now):
            return True
        if waiting >= self.concurrency:
            return False
        return self._idle is None and self._room(len(self._outcomes)) > 0

    def _report_due(self, now: float | None = None) -> bool:
        """Has an outcome waited REPORT_WAIT for its batch, by ``now`` (holding _cond)?"""
        since = self._outcomes_since
        if since is None:
            return False
        return (self.clock.monotonic() if now is None else now) >= since + REPORT_WAIT

    def _next_wake(self) -> float | None:
        """When the waiting claim loop looks again at the latest (holding _cond): the
        next schedule due, or the time an outcome has waited long enough."""
        due = self._next_tick()
        since = self._outcomes_since
        if since is not None and (due is None or since + REPORT_WAIT < due):
            return since + REPORT_WAIT
        return due

    def _room(self, reporting: int) -> int:
        """How many leases a claim that reports ``reporting`` outcomes asks for (holding
        _cond): enough for every handler slot and the prefetch, less those held.
        The prefetch is what the handlers get through in PREFETCH_HORIZON by their
        mean duration so far (none before the first has returned), at most
        ``prefetch``: short tasks go up to BATCH a transaction, long ones are not hoarded.
        A slot whose handler runs past its time limit counts for neither (it may
        never be free again)."""
        free = self.concurrency - self._overdue
        if free <= 0:
            return 0
        mean = self._mean
        if mean is None:
            ahead = 0
        elif mean * self.prefetch <= free * PREFETCH_HORIZON:
            ahead = self.prefetch
        else:
            ahead = int(free * PREFETCH_HORIZON / mean)
        return max(0, free + ahead - (self._held - self._overdue - reporting))

    def _runner(self) -> None:
        """A runner thread: runs the handlers of the leases claimed, taking them from
        the backlog one after the other, with no hand-off to another thread per task."""
        self._runners.add(threading.get_ident())
        while True:
            with self._cond:
                entry = self._next_job()
            if entry is None:
                return
            if entry.state is Phase.RELEASED:  # asked to stop before it started: not run
                self._hand_back([entry], "was asked to stop before its handler started")
                continue
            try:
                if self.tracer is not None:
                    self.tracer.start(entry.lease)
                self._executor.run(entry)
            except BaseException:  # (the executor reports a handler's own errors)
                self.log.error("worker error in a runner thread", exc_info=True)

    def _next_job(self) -> Running | None:
        """The next job of the backlog for a runner (holding _cond), once a slot is free;
        None once the worker stops (the leases not started are given back).  One whose
        task was asked to stop (a heartbeat learnt it) comes RELEASED, to be given
        back (which ends it CANCELLED) instead of run."""
        backlog = self._backlog
        while True:
            if self._stopping or self._returned:
                return None
            while backlog and self._active < self.concurrency:
                entry = backlog.popleft()
                if entry.lost:  # its lease was lost while it waited: not run
                    entry.state = Phase.RELEASED
                    del self._running[entry.lease.token]
                    self._held -= 1
                    self._stats.lost += 1
                    self._done_with(entry.lease, "lost")
                    fields = task_fields(entry.lease)
                    event(self.log, logging.WARNING, "task lost", fields, outcome="lost")
                    continue
                if entry.stop_requested:
                    entry.state = Phase.RELEASED
                    return entry
                self._active += 1
                entry.state = Phase.RUNNING
                entry.started = self.clock.monotonic()
                if self.time_limit is not None:
                    self._monitor.scheduled(entry)
                self._monitor.bound_backlog()
                return entry
            if self._turn_due(0):
                self._cond.notify_all()  # the claim loop (the backlog just ran low)
            self._work.wait()

    def _tick_schedules(self) -> bool:
        """Add the tasks of the schedules due by the worker's clock (queue.tick), and
        note when each is due next; True if tasks were added.  A transient error is
        logged and the schedule tried again after BUSY_PAUSE."""
        added = False
        for i, schedule in enumerate(self.schedules):
            now = self.clock.monotonic()
            if now < self._ticks[i]:
                continue
            try:
                ticked = self.queue.tick(schedule)
            except TRANSIENT as exc:
                self._log_busy(exc)
                self._ticks[i] = now + BUSY_PAUSE
                continue
            if ticked.added:
                added = True
                self.log.info(
                    "schedule %r: %d periodic task(s) added, %s",
                    schedule.name,
                    len(ticked.added),
                    " to ".join(dict.fromkeys((ticked.added[0], ticked.added[-1]))),
                )
            wait = math.inf if ticked.next_at is None else max(0, ticked.next_at - ticked.now)
            self._ticks[i] = now + wait
        return added

    def _next_tick(self) -> float | None:
        """When the next schedule is due, by the worker's clock (None: no schedules)."""
        return min(self._ticks, default=None)

    def _until_tick(self, seconds: float) -> float:
        """``seconds``, or less if a schedule is due sooner (an idle pause ends then)."""
        due = self._next_tick()
        return seconds if due is None else min(seconds, max(0.0, due - self.clock.monotonic()))

    def _tick_due(self) -> bool:
        due = self._next_tick()
        return due is not None and self.clock.monotonic() >= due

    def _idle_end(self) -> bool:
        """Nothing to claim and no handler running: True if run() returns now (it
        was asked to stop when idle, or when drained and the queue has nothing
        RESERVED or WAITING either)."""
        if self._until is None:
            return False
        if self._until == "drained":
            now = self.clock.monotonic()
            if now < self._drain_check:
                return False
            self._drain_check = now + DRAIN_CHECK
            pending = self._pending()
            if pending is None or any(pending):
                self.log.debug("queue %r: waiting for %s", self.queue.queue, _pending_text(pending))
                return False
        self.log.debug("queue %r is idle; stopping", self.queue.queue)
        return True

    def _pending(self) -> tuple[int, int, int] | None:
        """(AVAILABLE, RESERVED, WAITING) tasks of the queue, read without the write
        lock; None if the read met a transient error (logged).  Tasks AVAILABLE when a
        claim found nothing are held back: the queue is paused, or their groups are at
        their limits (a rate lets one start later)."""
        try:
            counts = self.queue.snapshot().counts
        except TRANSIENT as exc:
            self._log_busy(exc)
            return None
        return (
            counts[State.AVAILABLE.value],
            counts[State.RESERVED.value],
            counts[State.WAITING.value],
        )

    def _left_behind(self) -> str:
        """For the last log line of a worker that stopped idle: what it left."""
        pending = self._pending()
        if pending is not None and not any(pending):
            return "; nothing left RESERVED or WAITING"
        return (
            f"; left behind: {_pending_text(pending)}; stop_when_drained "
            "(sqlq worker --drain) waits for them"
        )

    def _settle(self, *, claim: bool) -> bool | _Busy:
        """One transaction: report every outcome pending and, with ``claim``, take
        leases for the room there is (see _room; the outcomes reported free theirs
        in the same transaction, before the claim).  True if the claim found fewer
        tasks than it asked for; _BUSY (logged) if the call met a transient error,
        and then the outcomes wait for the next call.

        Outcomes that arrive while the call is in flight wait for the next one,
        so the tasks per commit grow with the load and are one when idle."""
        with self._cond:
            batch = self._outcomes[:MAX_BATCH]
            del self._outcomes[: len(batch)]
            since, self._outcomes_since = self._outcomes_since, None
            if self._outcomes:
                self._outcomes_since = self.clock.monotonic()
            wanted = min(self._room(len(batch)), MAX_BATCH) if claim else 0
            self._held += wanted  # reserved: the one rule that bounds the leases held
        completed = [(e.lease.task_id, e.lease.token, e.result) for e, x, _ in batch if x is None]
        failed = [
            (e.lease.task_id, e.lease.token, *failure(x)) for e, x, _ in batch if x is not None
        ]
        began = self.clock.monotonic()  # (before the leases' time began: see _take)
        try:
            done, states, leases = self.queue.settle_and_claim(
                wanted, completed=completed, failed=failed
            )
        except BaseException as exc:
            with self._cond:  # nothing changed: the outcomes go with the next call
                self._outcomes[:0] = batch
                self._outcomes_since = since
                self._held -= wanted
                self._cond.notify_all()
            if not isinstance(exc, TRANSIENT):
                raise
            self._log_busy(exc)
            return _BUSY
        if self.metrics is not None:
            self.metrics.transaction(self.clock.monotonic() - began)
        answers = iter(done), iter(states)
        answered = [(*outcome, next(answers[outcome[1] is not None])) for outcome in batch]
        with self._cond:
            self._stats.commits += 1
            for entry, error, late, answer in answered:
                self._acknowledge(entry, error, late, answer)
                del self._running[entry.lease.token]
            self._held -= len(batch) + wanted - len(leases)
            self._cond.notify_all()
        if self.metrics is not None or self.tracer is not None:
            for entry, error, late, answer in answered:  # (not holding _cond: spans export)
                if not late:  # (a late one was counted when the time limit failed its task)
                    self._done_with(entry.lease, _final(answer), error)
        if leases:
            self._take(leases, began)
        return len(leases) < wanted

    def _take(self, leases: list[Lease], asked: float) -> None:
        """Leases just obtained, for room reserved for them: into the backlog, where the
        runners take them, heartbeated until they run; or, if the worker is stopping,
        released at once.  Their first heartbeat is due a heartbeat after ``asked``, when
        the call that claimed them began (the worker's clock), not after it returned: a
        lease runs from its transaction's time, and a call that returns late (a slow
        commit, a loaded machine) must not eat into the lease's margin."""
        now = self.clock.monotonic()
        beat = asked + self.heartbeat
        with self._cond:
            self._stats.claimed += len(leases)
            stopping = self._stopping
            if not stopping:
                running, backlog = self._running, self._backlog
                for lease in leases:
                    entry = Running(lease, started=now, next_beat=beat, state=Phase.QUEUED)
                    entry.queue = self.queue  # (current_task's)
                    running[lease.token] = entry
                    backlog.append(entry)
                self._monitor.scheduled(entry)  # (all have the same first heartbeat)
                self._monitor.bound_backlog()
                self._work.notify(len(leases))
        if stopping:
            self._let_releases_wait()
            for lease in leases:
                self._give_back(lease, "was claimed as the worker stopped")
            with self._cond:
                self._held -= len(leases)
                self._cond.notify_all()
            return
        if self.log.isEnabledFor(logging.DEBUG):
            for lease in leases:
                event(self.log, logging.DEBUG, "task claimed", task_fields(lease))

    def _start(self, entry: Running) -> None:
        """Run the handler of a job taken from the backlog, in this runner thread (an
        async one goes on to the event loop)."""
        if self.tracer is not None:
            self.tracer.start(entry.lease)
        self._executor.run(entry)

    def _listen_for_announcements(self) -> None:
        """Where the queue announces new tasks, be told (and, unless poll_max was
        given, poll only every PUSHED_POLL_MAX seconds for what nobody announces)."""
        cancel = self.queue.on_new_tasks(self._on_announcement)
        if cancel is not None:
            self._cancel_announcements = cancel
            if not self._poll_max_given:
                self.poll_max = max(PUSHED_POLL_MAX, self.poll_min)

    def _on_announcement(self) -> None:
        """New tasks were announced (called in the queue's listener thread)."""
        with self._cond:
            self._announced = True
            self._cond.notify_all()

    def _woken(self) -> bool:
        """Why an idle pause ends early (asked holding _cond)."""
        return self._stopping or bool(self._outcomes) or self._announced

    def _take_announcement(self) -> bool:
        """After an idle pause ended early: True (and forgotten) if tasks were
        announced and the worker is not stopping: claim at once."""
        with self._cond:
            announced, self._announced = self._announced, False
            return announced and not self._stopping

    def _ready(self) -> bool:
        """Would a claim find a task now (``queue.ready``)?  If not, when is the next
        task due that it holds back by time (_read_next_due)."""
        try:
            ready = self.queue.ready()
        except TRANSIENT as exc:  # readers are not blocked in WAL mode; be safe anyway
            self._log_busy(exc)
            return True
        if not ready:
            self._read_next_due()
        return ready

    def _read_next_due(self) -> None:
        """Note when the queue has a task due next that a claim does not find now
        (``queue.next_due``: a group's next rate slot, a lease running out, a
        WAITING task), by the worker's clock: an idle pause ends then at the latest
        (_until_due), not at the next poll.  A transient error leaves it unknown."""
        try:
            seconds = self.queue.next_due()
        except TRANSIENT as exc:
            self._log_busy(exc)
            seconds = None
        self._due_at = None if seconds is None else self.clock.monotonic() + seconds

    def _until_due(self, seconds: float) -> float:
        """``seconds`` (an idle pause), or less if a task falls due sooner (see
        _read_next_due); a time that has passed is forgotten (the next ``ready``
        reads the next one)."""
        due = self._due_at
        if due is None:
            return seconds
        left = due - self.clock.monotonic()
        if left <= 0:
            self._due_at = None
            return seconds
        return min(seconds, left)

    def _in_flight(self) -> int:
        """Leases held: prefetched, running or being reported."""
        with self._cond:
            return sum(e.state in HELD for e in self._running.values())

    def _wait_for_stop(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stop() is called; True if it was."""
        return self._pause(seconds, lambda: self._stopping)

    def _pause(self, seconds: float, done: Callable[[], bool]) -> bool:
        """Wait ``seconds`` or until ``done()`` (asked holding _cond); return ``done()``."""
        end = self.clock.monotonic() + seconds
        with self._cond:
            while not done() and self.clock.monotonic() < end:
                self._wait(end)
            return done()

    def _wait(self, until: float | None = None) -> None:
        """Wait on _cond (held) for a notification, until ``until`` at most."""
        self.clock.wait(self._cond, until)

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

    def _persist(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T | _Busy:
        """``call`` retried while it raises Busy, until run() gives up (then _BUSY)."""
        while True:
            try:
                return call(*args, **kwargs)
            except TRANSIENT as exc:
                self._log_busy(exc)
            if self._pause(BUSY_PAUSE, lambda: self._returned):
                return _BUSY

    # --- running handlers (sqlq.executors) ------------------------------------------------

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

    def _finished(self, entry: Running, error: BaseException | None) -> None:
        """The handler returned or raised: its outcome waits for the claim loop to
        report it (its slot stays reserved until then).  A coroutine that ends
        with the CancelledError of the worker's cancel is reported no more."""
        lease = entry.lease
        entry.ended = ended = self.clock.monotonic()
        if error is None and entry.result is not None:
            entry.result, error = self._stored_result(entry.result)
        # (type(), never isinstance: a handler's exception may have a __class__ that raises)
        cancelled = entry.cancelled and issubclass(type(error), asyncio.CancelledError)
        with self._cond:
            self._active -= 1
            if entry.overdue:
                entry.overdue = False
                self._overdue -= 1
            mean = self._mean
            took = ended - entry.started
            self._mean = took if mean is None else mean + (took - mean) * DURATION_WEIGHT
            if self._returned or entry.state is Phase.RELEASED or cancelled:
                del self._running[lease.token]
                self._held -= 1
                self._cond.notify_all()
                given_up, first = True, False
            else:
                late = entry.state is Phase.TIMED_OUT
                entry.state = Phase.REPORTING
                first = not self._outcomes
                if first:
                    self._outcomes_since = ended
                self._outcomes.append((entry, error, late))
                given_up = False
            if first or self._turn_due(len(self._backlog), ended):
                # The claim loop: outcomes to report (the first of a batch, by
                # REPORT_WAIT at the latest), or room to claim.
                self._cond.notify_all()
            if threading.get_ident() not in self._runners:
                self._work.notify()  # the event loop's: a runner may wait for the slot
        if cancelled:
            self.log.debug("task %r: its handler was cancelled", lease.task_id)
        elif given_up:
            self.log.warning(
                "handler of task %r returned after the worker gave the task up; "
                "its result is ignored",
                lease.task_id,
            )

    def _stored_result(self, result: object) -> tuple[object, NotRetryable | None]:
        """A handler's return value as its report stores it: (the plain JSON value, read
        back from its encoding, None), or (None, why it cannot be stored).  Encoded
        here, once, so that one bad value never fails a whole report, not even one
        whose encoding raises (anything) or changes from call to call: its task then
        goes DEAD with that error, as retrying would return the same."""
        try:
            stored = check_result(result, self.queue.max_payload_bytes)
            return (None if stored is None else payloads.decode(stored)), None
        except InvalidArgument as exc:
            return None, NotRetryable(describe_error(exc))
        except BaseException as exc:
            return None, NotRetryable(f"the result cannot be stored: {describe_error(exc)}")

    def _acknowledge(
        self, entry: Running, error: BaseException | None, late: bool, answer: bool | str | None
    ) -> None:
        """Count and log an outcome the queue has answered (holding _cond)."""
        if self.metrics is not None:
            ran = 0.0 if entry.ended is None else entry.ended - entry.started
            self.metrics.handled(entry.lease.name, _outcome(error, late, answer), ran)
        if answer and error is None:
            self._stats.completed += 1
            if self.log.isEnabledFor(logging.DEBUG):  # a line per task: built only if shown
                fields = self._fields(entry, error)
                event(self.log, logging.DEBUG, "task completed", fields, outcome="COMPLETED")
        elif answer == State.CANCELLED:
            self._stats.cancelled += 1
            fields = self._fields(entry, error)
            event(self.log, logging.INFO, "task cancelled", fields, outcome=answer)
        elif answer:
            self._stats.failed += 1
            self._failed(self._fields(entry, error), str(answer), error)
        elif late:
            fields = self._fields(entry, error)
            event(self.log, logging.WARNING, "task result refused", fields, why="time limit")
        else:
            self._stats.lost += 1
            what = "completion" if error is None else "failure"
            fields = self._fields(entry, error)
            event(self.log, logging.WARNING, "task lost", fields, outcome="lost", refused=what)

    @staticmethod
    def _fields(entry: Running, error: BaseException | None) -> dict[str, Any]:
        """The fields of a task's outcome: the task's, how long its handler ran, its error."""
        fields = task_fields(entry.lease)
        if entry.ended is not None:
            fields["duration"] = entry.ended - entry.started
        if error is not None:
            fields["error"] = describe_error(error)
        return fields

    def _failed(
        self, fields: dict[str, Any], state: str, error: BaseException | None = None
    ) -> None:
        """Log a failure the queue accepted (holding _cond): WARNING, as the handler's
        failure is not the worker's; "task dead" once it used its last attempt."""
        dead = state == "DEAD"
        self._stats.dead += dead
        traceback = error if error is not None and self.log.isEnabledFor(logging.DEBUG) else None
        what = "task dead" if dead else "task failed"
        event(self.log, logging.WARNING, what, fields, outcome=state, exc_info=traceback)

    def _count(self, what: str) -> None:
        with self._cond:
            setattr(self._stats, what, getattr(self._stats, what) + 1)

    def _done_with(self, lease: Lease, outcome: str, error: BaseException | None = None) -> None:
        """The worker is done with ``lease``: ``outcome`` (sqlq.worker_metrics's) is
        stored, or given up; counted, and its span ended."""
        if self.metrics is not None:
            self.metrics.counted(lease.name, outcome)
        if self.tracer is not None:
            self.tracer.end(lease, outcome, error)

    # --- time limits (the monitor finds them) --------------------------------------------

    def _time_out(self, entry: Running) -> None:
        lease = entry.lease
        error = f"time limit of {self.time_limit:g}s exceeded"
        state = self._persist(self.queue.fail, lease.task_id, token=lease.token, error=error)
        self._executor.cancel(entry)  # once failed: its CancelledError is not the error
        if isinstance(state, _Busy):
            return
        # A thread's handler runs on until it returns (its result will be refused);
        # a coroutine was cancelled.
        fields = {**task_fields(lease), "time_limit": self.time_limit, "error": error}
        self._done_with(lease, _final(state))
        with self._cond:
            if state is None:
                self._stats.lost += 1
                event(self.log, logging.WARNING, "task lost", fields, outcome="lost")
            else:
                self._stats.timed_out += 1
                self._failed(fields, state)

    # --- stopping ---------------------------------------------------------------------------

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

    def _hurry_up(self) -> None:
        """Skip what is left of the grace period (its waits for locks too)."""
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
        self.queue.interrupt_waits(0)

    def _drain(self) -> None:
        """Give back the leases prefetched, report what handlers return within the
        grace period, then release the rest."""
        with self._cond:
            start = self._stop_at if self._stop_at is not None else self.clock.monotonic()
            queued = bool(self._backlog)
        if queued:
            self._let_releases_wait()
            self._shed("was prefetched and had not started when the worker stopped")

        def settled() -> bool:
            return self._hurry or not any(e.state in ACTIVE for e in self._running.values())

        self._report_until(start + self.grace, settled)
        with self._cond:
            pending = any(e.state in ACTIVE for e in self._running.values())
            give_back = [e.lease for e in self._running.values() if e.state is Phase.RUNNING]
            given_up = [
                e for e in self._running.values() if e.state in (Phase.RUNNING, Phase.TIMED_OUT)
            ]
            for entry in given_up:
                entry.state = Phase.RELEASED
        for entry in given_up:
            self._executor.cancel(entry)
        # The grace is over: releases and the reports still pending (their Busy
        # retries) get RELEASE_WAIT of their own, then they give up.
        last = self.clock.monotonic() + RELEASE_WAIT
        if pending:
            self._let_releases_wait()
        for lease in give_back:
            self._give_back(lease, "was still running after the grace period")
        self._report_until(last, lambda: not self._outcomes)
        with self._cond:
            self._returned = True
            self._cond.notify_all()
            self._monitor.end()
            self._abandon("could not be reported before the worker stopped")

    def _shed(self, why: str, level: int = logging.INFO) -> None:
        """Give back every lease waiting in the backlog (released: the attempt is not
        counted), at a stop, once the oldest waited BACKLOG_WAIT (sqlq.monitor) or a
        handler ran past its time limit; the prefetch is then cut as if handlers
        took as long as the oldest waited (the mean duration was no guide)."""
        with self._cond:
            queued = list(self._backlog)
            self._backlog.clear()
            if not queued:
                return
            waited = self.clock.monotonic() - queued[0].started
            mean = self._mean
            self._mean = waited if mean is None else max(mean, waited)
            for entry in queued:
                entry.state = Phase.RELEASED
        self._hand_back(queued, why, level)

    def _hand_back(self, entries: list[Running], why: str, level: int = logging.INFO) -> None:
        """Release the leases of ``entries``, taken from the backlog and RELEASED (not
        run, not heartbeated), and stop counting them as held."""
        for entry in entries:
            self._give_back(entry.lease, why, level)
        with self._cond:
            for entry in entries:
                del self._running[entry.lease.token]
            self._held -= len(entries)
            self._cond.notify_all()

    def _report_until(self, end: float, done: Callable[[], bool]) -> None:
        """Report outcomes as they come, claiming nothing, until ``done()`` (asked
        holding _cond) or the clock reaches ``end``."""
        while True:
            with self._cond:
                while not (done() or self._outcomes) and self.clock.monotonic() < end:
                    self._wait(end)
                if done() or self.clock.monotonic() >= end:
                    return
            try:
                if isinstance(self._settle(claim=False), _Busy):
                    self._pause(BUSY_PAUSE, done)
            except Exception:
                self.log.error("worker error while reporting outcomes", exc_info=True)
                with self._cond:
                    self._abandon("could not be reported")

    def _abandon(self, why: str) -> None:
        """Give up the outcomes not reported (holding _cond): their leases run out."""
        for entry, error, _ in self._outcomes:
            entry.state = Phase.RELEASED
            self._done_with(entry.lease, "abandoned", error)
            self.log.warning(
                "task %r: the outcome of its handler %s; its lease runs out in at most %gs "
                "and the task is retried then",
                entry.lease.task_id,
                why,
                self.queue.lease_seconds,
            )
        self._outcomes.clear()

    def _let_releases_wait(self) -> None:
        """Let waits go on until the grace ends, or for RELEASE_WAIT if that is later:
        a release while stopping gets RELEASE_WAIT, as the drain's do, even once
        the grace (which ends every wait) is over."""
        with self._cond:
            assert self._stop_at is not None
            left = 0.0 if self._hurry else self._stop_at + self.grace - self.clock.monotonic()
        self.queue.interrupt_waits(max(left, RELEASE_WAIT))

    def _cancelled(self, lease: Lease) -> bool:
        """Did the release of ``lease`` end its task CANCELLED (a stop was asked of it,
        which this worker may not have learnt yet)?  One read, at a release only (a stop,
        a backlog given back); a read that fails counts it as released."""
        try:
            return self.queue.status(lease.task_id) == State.CANCELLED
        except Exception:
            return False

    def _give_back(self, lease: Lease, why: str, level: int = logging.WARNING) -> None:
        """Release ``lease`` (its attempt is not counted).  One that cannot be released
        runs out at its deadline, and its task is retried then."""
        try:
            done = self.queue.release(lease.task_id, lease.token)
        except Exception as exc:
            self.log.log(
                logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR,
                "task %r %s but could not be released (%s: %s); its lease runs out in at "
                "most %gs and the task is retried then",
                lease.task_id,
                why,
                type(exc).__name__,
                exc,
                self.queue.lease_seconds,
                exc_info=not isinstance(exc, TRANSIENT),
            )
            return
        outcome = "lost" if not done else "cancelled" if self._cancelled(lease) else "released"
        self._done_with(lease, outcome)
        self._count(outcome)
        fields = task_fields(lease)
        if outcome == "cancelled":  # a stop was asked of it: the release ended it
            event(self.log, logging.INFO, "task cancelled", fields, outcome=outcome, reason=why)
        elif outcome == "released":  # back in line, its attempt not counted
            event(self.log, level, "task released", fields, reason=why)
        else:
            event(self.log, logging.WARNING, "task lost", fields, outcome="lost", refused="release")


def _schedules(handler: object, given: Iterable[Schedule], limit: int) -> list[Schedule]:
    """The schedules a worker runs: those given, and a Tasks registry's, each with
    payloads of at most ``limit`` bytes (the queue's)."""
    if isinstance(given, Schedule) or not isinstance(given, Iterable):
        raise InvalidConfig("schedules must be an iterable of sqlq.Schedule")
    found = [check_schedule(schedule) for schedule in given]
    if isinstance(handler, Tasks):
        for schedule in found:
            handler.check_runs(schedule)
        found += handler.schedules
    for schedule in found:
        schedule.check_payload(limit)
    names = [schedule.name for schedule in found]
    if len(set(names)) != len(names):
        raise InvalidConfig(f"two schedules of a worker have the same name: {sorted(names)}")
    return found


def _outcome(error: BaseException | None, late: bool, answer: bool | str | None) -> str:
    """An outcome as WorkerMetrics counts it (the cases of Worker._acknowledge)."""
    if answer:
        return (
            "completed" if error is None else "cancelled" if answer == State.CANCELLED else "failed"
        )
    return "late" if late else "lost"


def _final(answer: bool | str | None) -> str:
    """The outcome a task's report ends with (sqlq_worker_tasks_total's), from the queue's
    answer to it: True (completed), the failed task's state now, or None (refused)."""
    if answer is True:
        return "completed"
    if answer is None or answer is False:
        return "lost"
    return {"DEAD": "dead", "CANCELLED": "cancelled"}.get(answer, "retried")


def _pending_text(pending: tuple[int, int, int] | None) -> str:
    if pending is None:
        return "tasks the queue could not be read for"
    available, reserved, waiting = pending
    held = f"{available} AVAILABLE (held back by a pause or their groups' limits), "
    return (
        f"{held if available else ''}{reserved} RESERVED (leases of other workers), "
        f"{waiting} WAITING (for a delay or a retry)"
    )


class _Busy:
    """A queue call raised Busy (a sentinel, distinct from every call's answers)."""


_BUSY = _Busy()


def _positive(value: object, what: str, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not value <= MAX_LEASE_SECONDS or value < 0 or (value == 0 and not zero):
        bound = "from 0" if zero else "more than 0"
        raise InvalidConfig(
            f"{what} must be a number of seconds {bound} to {MAX_LEASE_SECONDS:g}, got {value!r}"
        )
    return float(value)


# --- the command line's entry point --------------------------------------------------------


def resolve_target(target: str) -> Callable[[Any], object] | Tasks:
    """The callable (or ``sqlq.Tasks`` registry) named by ``"package.module:function"``
    (or ``module:Class.method``, ``module:tasks``)."""
    if not isinstance(target, str):
        raise InvalidConfig(f"handler target must be a str, not {type(target).__name__}")
    module_name, colon, path = target.partition(":")
    if not colon or not module_name or not path:
        raise InvalidConfig(f"handler target {target!r} must look like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # not found, or it raised (or exited) on import
        raise InvalidConfig(
            f"handler target {target!r}: cannot import module {module_name!r} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidConfig(
                f"handler target {target!r}: {module_name!r} has no attribute {path!r}"
            ) from None
    if not callable(obj) and not isinstance(obj, Tasks):
        raise InvalidConfig(
            f"handler target {target!r} is a {type(obj).__name__}, not callable nor a sqlq.Tasks"
        )
    handler: Callable[[Any], object] | Tasks = obj
    return handler


def _cwd_importable() -> None:
    """Let ``module:function`` name modules in the current directory, as ``python -m``
    does (the ``sqlq`` console script does not put it on sys.path).  Appended, so
    it never shadows an installed package."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def exit_past_lingering_threads(code: int, error: BaseException | None = None) -> None:
    """What ``sqlq worker`` does once its worker has stopped (``code``: its exit code;
    ``error``: what ``serve`` raised): nothing, unless threads that are not daemon
    threads still run (a handler started one and left it running), which would keep
    the process alive forever (Python waits for them at exit).  Then it logs a
    warning that names them (and the error, if any), flushes the logs and standard
    streams, and ends the process with ``os._exit(code)`` (1 after an error): the
    worker stopped cleanly, every lease was reported or released, and nothing of
    sqlq's waits for those threads."""
    lingering = [
        thread.name
        for thread in threading.enumerate()
        if not thread.daemon and thread is not threading.main_thread() and thread.is_alive()
    ]
    if not lingering:
        return
    log = logging.getLogger("sqlq.worker")
    if error is not None:
        code = 1
        log.error("worker stopped on an error: %s", describe_error(error))
    log.warning(
        "%d thread(s) that are not daemon threads still run (%s), started by a handler and "
        "never ended; they would keep the process alive, so it exits now (code %d) "
        "without waiting for them",
        len(lingering),
        ", ".join(lingering),
        code,
    )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def serve(
    db: str,
    target: str,
    *,
    queue: str = "default",
    concurrency: int = 1,
    prefetch: int | None = None,
    lease_seconds: float | None = None,
    time_limit: float | None = None,
    grace: float = 30.0,
    stop_when_idle: bool = False,
    stop_when_drained: bool = False,
    log_level: int | str = logging.INFO,
    summary_every: float | None = 60.0,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    metrics_token: str | None = None,
    tracing: bool = False,
    **options: Any,
) -> int:
    """Run a worker on queue ``queue`` of the database ``db`` until stopped; exit code 0.

    ``target`` names the handler, ``"package.module:function"``, or a
    ``sqlq.Tasks`` registry; modules in the current directory can be named.  A
    handler that cannot take a task is refused (InvalidConfig) before anything
    is claimed.  sqlq's loggers log at ``log_level`` and up, to stderr unless the
    root logger already has handlers; every ``summary_every`` seconds (None or 0:
    never) the worker logs a summary; ``metrics_port`` (``metrics_host``,
    ``metrics_token``) serves its metrics and ``tracing`` makes a span of each task
    run (see Worker).  Stops on SIGTERM or SIGINT when run in the
    main thread (see the module docstring).  ``options`` are the backend's, as
    for ``Queue`` (on SQLite: ``synchronous``, ``busy_timeout``).
    """
    _cwd_importable()
    handler = resolve_target(target)
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=log_level, format=LOG_FORMAT)
    logging.getLogger("sqlq").setLevel(log_level)
    with Queue(
        db,
        lease_seconds=lease_seconds,  # None: the queue's stored settings (sqlq.settings)
        queue=queue,
        **options,
    ) as opened:
        worker = Worker(
            opened,
            handler,
            concurrency=concurrency,
            prefetch=prefetch,
            time_limit=time_limit,
            grace=grace,
            summary_every=summary_every,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            metrics_token=metrics_token,
            tracing=tracing,
        )
        worker.run(stop_when_idle=stop_when_idle, stop_when_drained=stop_when_drained)
    return 0
