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
  once its oldest lease has waited BACKLOG_WAIT (sqlq.worker.monitor; a handler took
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
  sqlq.worker.executors) tells it its queue and lease.
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
  threads and the loop are sqlq.worker.executors.
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

from ..events import task_fields
from .batches import BATCH, DURATION_WEIGHT, PREFETCH_HORIZON, REPORT_WAIT
from .clock import SIGNAL_CHECK, Clock, SystemClock
from .context import TaskContext, current_task
from .executors import stop_requested
from .lifecycle import Worker
from .process import LOG_FORMAT, exit_past_lingering_threads, resolve_target, serve
from .shutdown import RELEASE_WAIT
from .state import BUSY_PAUSE, REPEAT_WARNING
from .stats import WorkerStats
from .wakeups import DRAIN_CHECK, POLL_MAX, PUSHED_POLL_MAX

__all__ = [
    "BATCH",
    "BUSY_PAUSE",
    "DRAIN_CHECK",
    "DURATION_WEIGHT",
    "LOG_FORMAT",
    "POLL_MAX",
    "PREFETCH_HORIZON",
    "PUSHED_POLL_MAX",
    "RELEASE_WAIT",
    "REPEAT_WARNING",
    "REPORT_WAIT",
    "SIGNAL_CHECK",
    "Clock",
    "SystemClock",
    "TaskContext",
    "Worker",
    "WorkerStats",
    "current_task",
    "exit_past_lingering_threads",
    "resolve_target",
    "serve",
    "stop_requested",
    "task_fields",
]
