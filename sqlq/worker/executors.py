"""Executors: where a Worker runs its handlers, in threads or on an event loop.

A :class:`sqlq.Worker` claims leases, keeps them alive, enforces time limits and
reports outcomes; it hands each lease to an :class:`Executor`, which calls the
handler and gives back the outcome (None, or the exception the handler raised).

* **Threads.**  ``run(job)`` makes the call in the caller's thread (the
  worker's runner threads, which take the jobs in batches: see sqlq.worker).  A
  call that returns a value is done.  A call that returns an *awaitable* (an
  ``async def`` handler, or a sync function - a router by task name, say - that
  calls one) is handed to the loop, and the thread goes on to the next job.
  So whether a handler is async is decided call by call, from what the call
  returns, not from the handler's type: one worker can run sync and async
  functions side by side.
* **The loop.**  One thread runs an asyncio event loop, started with the first
  awaitable; each awaitable is awaited there as a task of its own, many at once.
  The worker starts a job only in a free slot, so at most ``concurrency`` tasks
  (threads and coroutines together) run at once.  A blocking call inside an
  ``async def`` handler blocks the loop, and every coroutine on it: use
  ``await`` (``asyncio.to_thread`` for blocking work, :class:`sqlq.AsyncQueue`
  for the queue).
* **Cancelling.**  ``cancel(job)`` gives up on a job (its time limit, or the end
  of the grace period at a stop): a coroutine is cancelled (one not started yet
  never starts) and ends with ``CancelledError``; a thread cannot be stopped and
  runs on until its call returns.  The job's ``cancelled`` flag tells the
  worker that a ``CancelledError`` outcome was its own doing.
* **Stop requests.**  A handler's call (and its coroutine) runs with its job as
  the current one, so that :func:`stop_requested` tells the handler whether its
  task was asked to stop (``Queue.cancel``; the worker's heartbeats learn it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeGuard, TypeVar

from ..records import Lease

__all__ = ["Executor", "Job", "stop_requested"]


@dataclass(eq=False)
class Job:
    """A handler call on ``lease`` (a Worker's record of a running task extends it)."""

    lease: Lease
    #: Set by Executor.cancel: the worker gave up on the call.
    cancelled: bool = field(default=False, init=False)
    #: Set by the worker when a heartbeat finds that ``cancel`` asked the task to stop.
    stop_requested: bool = field(default=False, init=False)
    #: What the handler returned (awaited, for an async one), once it returned.
    result: object = field(default=None, init=False)


#: This process's id: read once, and again in a child of os.fork (the hook below), so
#: that a handler's call asks the kernel once (after it) whether it returns in a child
#: the handler forked, not twice (os.getpid is a system call: about 1.3 us here, twice
#: a task was 2.6 us of a task's 30-45).
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)

#: The job whose handler runs in this thread (or coroutine), if any.
_current: contextvars.ContextVar[Job | None] = contextvars.ContextVar("sqlq_job", default=None)


def current_job() -> Job | None:
    """The job whose handler runs in this thread (or coroutine), if any."""
    return _current.get()


def stop_requested() -> bool:
    """In a Worker's handler: was the task it runs asked to stop (``Queue.cancel``)?

    The worker learns it at its next heartbeat of the task (every ``heartbeat``
    seconds).  A handler that sees True should stop by raising (any exception):
    the task then ends CANCELLED and is not retried.  Returning completes it.
    False outside a handler."""
    job = _current.get()
    return job is not None and job.stop_requested


J = TypeVar("J", bound=Job)

#: What an executor reports when a call has ended: the job, and the exception the
#: handler raised (None if it returned).
Done = Callable[[J, BaseException | None], None]


class Executor(Generic[J]):
    """Runs ``call(job.lease)`` for each job it is given; ``done(job, error)`` gets the
    outcome, from the thread that ran the call or from the loop's thread."""

    def __init__(
        self,
        call: Callable[[Lease], object],
        done: Done[J],
        *,
        name: str,
        log: logging.Logger,
    ) -> None:
        self._call = call
        self._done = done
        self._name = name
        self._log = log
        self._lock = threading.Lock()  # guards _loop and _shut
        self._loop: _Loop[J] | None = None
        self._shut = False

    def run(self, job: J) -> None:
        """Call the handler on ``job`` in this thread (the caller holds a slot for it).
        A value or an exception is reported (``done``) before this returns; an
        awaitable goes to the loop, which reports it once it has ended."""
        # A context of the job's own, which an async handler's task runs in too:
        # what the call sets in it (the worker's current_task) is the job's alone,
        # and stop_requested() finds the job in it.
        pid = _pid
        context = contextvars.copy_context()
        context.run(_current.set, job)
        try:
            result = context.run(self._call, job.lease)
        except BaseException as exc:  # a handler's SystemExit fails its task too
            forked_child_ends(pid, 1)
            self._report(job, exc)
            return
        forked_child_ends(pid, 0)
        if result is not None and _awaitable(result):  # (None: the usual, cheaply)
            self._event_loop().submit(job, result, context)
        else:
            job.result = result
            self._report(job, None)

    def cancel(self, job: J) -> None:
        """Give up on ``job``: its coroutine, if it has one, is cancelled (now, or as
        soon as it is handed to the loop).  Thread-safe; idempotent."""
        job.cancelled = True
        loop = self._loop  # one created after this line sees the flag when it starts the job
        if loop is not None:
            loop.cancel(job)

    def shutdown(self) -> None:
        """No more jobs: the loop ends once its tasks have ended."""
        with self._lock:
            self._shut = True
            if self._loop is not None:
                self._loop.shutdown()

    def _event_loop(self) -> _Loop[J]:
        with self._lock:
            if self._loop is None:
                self._loop = _Loop(f"{self._name}-loop", self._report)
                if self._shut:  # a late call: its loop ends with it
                    self._loop.shutdown()
            return self._loop

    def _report(self, job: J, error: BaseException | None) -> None:
        try:
            self._done(job, error)
        except BaseException:
            self._log.error(
                "worker error after the handler of task %r", job.lease.task_id, exc_info=True
            )


class _Loop(Generic[J]):
    """An event loop in a daemon thread of its own; each awaitable submitted is a task.

    ``_tasks`` and ``_closing`` are touched only on the loop's thread; the other
    threads reach the loop through ``call_soon_threadsafe``."""

    def __init__(self, name: str, report: Done[J]) -> None:
        self._report = report
        self._loop = asyncio.new_event_loop()
        self._tasks: dict[J, asyncio.Task[BaseException | None]] = {}
        self._closing = False
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, job: J, awaitable: Awaitable[object], context: contextvars.Context) -> None:
        self._loop.call_soon_threadsafe(self._start, job, awaitable, context)

    def cancel(self, job: J) -> None:
        self._loop.call_soon_threadsafe(self._cancel, job)

    def shutdown(self) -> None:
        self._loop.call_soon_threadsafe(self._close)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def _start(self, job: J, awaitable: Awaitable[object], context: contextvars.Context) -> None:
        if job.cancelled:  # given up before it reached the loop: it never starts
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            self._report(job, asyncio.CancelledError())
            return
        task = self._loop.create_task(_outcome(job, awaitable), context=context)
        self._tasks[job] = task
        task.add_done_callback(functools.partial(self._end, job))

    def _cancel(self, job: J) -> None:
        task = self._tasks.get(job)
        if task is not None:
            task.cancel()

    def _end(self, job: J, task: asyncio.Task[BaseException | None]) -> None:
        del self._tasks[job]
        # Cancelled before its first step, _outcome could not catch the CancelledError.
        self._report(job, asyncio.CancelledError() if task.cancelled() else task.result())
        if self._closing and not self._tasks:
            self._loop.stop()

    def _close(self) -> None:
        self._closing = True
        if not self._tasks:
            self._loop.stop()


def _awaitable(result: object) -> TypeGuard[Awaitable[object]]:
    """Is a handler's return value awaitable?  False for one whose type cannot even be
    asked (a ``__class__`` that raises): its task then fails as unstorable."""
    try:
        return inspect.isawaitable(result)
    except BaseException:
        return False


async def _outcome(job: Job, awaitable: Awaitable[object]) -> BaseException | None:
    """Await a handler's awaitable: None (what it returned is ``job.result``), or what
    it raised (a CancelledError, or a SystemExit, which would otherwise escape the
    loop and end its thread)."""
    pid = _pid
    try:
        job.result = await awaitable
    except BaseException as exc:
        forked_child_ends(pid, 1)
        return exc
    forked_child_ends(pid, 0)
    return None


def forked_child_ends(pid: int, code: int) -> None:
    """In a child that a handler forked (``os.getpid() != pid``, the worker's) and that
    returned (``code`` 0) or raised (1) into the worker's code: end the child now,
    with ``os._exit(code)`` once its standard streams are flushed.  It has none of
    the worker's other threads, so it must neither report the task (the parent
    does) nor wait for another job: it would hang, and hold the pipes its parent's
    reader waits on."""
    if os.getpid() != pid:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)
