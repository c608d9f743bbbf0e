"""AsyncQueue: the calls of a Queue as coroutines, for asyncio programs.

``AsyncQueue(path_or_url, **options)`` opens a :class:`sqlq.Queue` with the same
arguments, or ``AsyncQueue(queue)`` wraps one already open; ``aq.sync`` is that
Queue.  Every public call of Queue is a coroutine here, with the same
signature and answers (``await aq.add("t", payload=...)``, ``await
aq.claim()``), and ``async with AsyncQueue(...) as aq`` closes the queue at the
end.  There is no second copy of the queue's logic: each twin is made from
the Queue method of the same name by ``_twin`` and runs it as it is, but for
``wait_for_result``, whose looks at the task run that way and whose pauses are
awaited (``asyncio.sleep``), with sqlq.results deciding as for Queue.

* **The event loop never waits.**  A twin runs its Queue call in a thread of
  the AsyncQueue's own (one, made at the first call): waits for the write lock,
  disk writes and fsyncs happen there while the loop goes on.  One thread,
  because a Queue has one connection and runs one call at a time anyway (its
  thread lock): more threads would only wait on that lock, and the loop's
  default executor (``asyncio.to_thread``) stays free for other work.
* **Order and waits.**  The calls of one AsyncQueue run one after another in
  the order they were made.  A call's ``busy_timeout`` counts from when its
  turn comes; to bound the whole wait of an ``await``, use ``asyncio.timeout``.
  A call cancelled before its turn never runs; one cancelled while it runs
  still runs to its end (a Queue call cannot be interrupted), and only its
  answer is lost: an ``add`` retried with the same ``task_id`` then answers
  False, as after any unknown outcome.
* **Opening.**  The constructor opens the Queue as ``sqlq.Queue`` does, in the
  calling thread: creating or migrating a file may wait for its migrate lock
  (up to ``busy_timeout``).  Make the AsyncQueue when the program starts, or
  ``await asyncio.to_thread(sqlq.AsyncQueue, ...)`` inside a running loop.
* **Closing.**  ``close`` closes the Queue (a wrapped one too) and ends the
  thread; later calls raise :class:`sqlq.errors.QueueClosed`, as the Queue's do.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .contract import Number
from .durable import Queue
from .errors import InvalidConfig
from .results import DEFAULT_POLL, ResultWait

__all__ = ["AsyncQueue"]

P = ParamSpec("P")
R = TypeVar("R")


def _twin(
    method: Callable[Concatenate[Queue, P], R],
) -> Callable[Concatenate[AsyncQueue, P], Coroutine[Any, Any, R]]:
    """The coroutine twin of a Queue method: the same call, run in the AsyncQueue's
    thread.  It carries the method's name, docstring and signature."""

    @functools.wraps(method)
    async def twin(self: AsyncQueue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(functools.partial(method, self.sync, *args, **kwargs))

    return twin


class AsyncQueue:
    """A :class:`sqlq.Queue` whose calls are coroutines; see the module docstring.

    ``AsyncQueue(path_or_url, **options)`` takes Queue's arguments and opens one;
    ``AsyncQueue(queue)`` wraps an open Queue (shared with sync code, a Worker's
    say: it is thread-safe).
    """

    def __init__(self, path_or_url: str | os.PathLike[str] | Queue, **options: Any) -> None:
        if isinstance(path_or_url, Queue):
            if options:
                raise InvalidConfig(
                    f"AsyncQueue(queue) takes no options (got {', '.join(options)}): "
                    "they are the Queue's, set when it was opened"
                )
            self.sync = path_or_url
        else:
            self.sync = Queue(path_or_url, **options)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlq-aio")
        self._closed = False

    async def _run(self, call: Callable[[], R]) -> R:
        if self._closed:  # the Queue refuses at once (QueueClosed): nothing to wait for
            return call()
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    add = _twin(Queue.add)
    reserve = _twin(Queue.reserve)
    claim = _twin(Queue.claim)
    complete = _twin(Queue.complete)
    fail = _twin(Queue.fail)
    extend = _twin(Queue.extend)
    heartbeat = _twin(Queue.heartbeat)
    cancel = _twin(Queue.cancel)
    pause = _twin(Queue.pause)
    resume = _twin(Queue.resume)
    release = _twin(Queue.release)
    status = _twin(Queue.status)
    info = _twin(Queue.info)
    add_many = _twin(Queue.add_many)
    claim_many = _twin(Queue.claim_many)
    complete_many = _twin(Queue.complete_many)
    settle_and_claim = _twin(Queue.settle_and_claim)
    complete_and_claim = _twin(Queue.complete_and_claim)
    tasks = _twin(Queue.tasks)
    dead = _twin(Queue.dead)
    redrive = _twin(Queue.redrive)
    purge = _twin(Queue.purge)
    stats = _twin(Queue.stats)
    snapshot = _twin(Queue.snapshot)
    ready = _twin(Queue.ready)
    next_due = _twin(Queue.next_due)
    counts = _twin(Queue.counts)
    checkpoint = _twin(Queue.checkpoint)
    tick = _twin(Queue.tick)
    forget_schedule = _twin(Queue.forget_schedule)
    result = _twin(Queue.result)
    progress = _twin(Queue.progress)
    set_limit = _twin(Queue.set_limit)
    remove_limit = _twin(Queue.remove_limit)
    limits = _twin(Queue.limits)
    groups = _twin(Queue.groups)
    beat_worker = _twin(Queue.beat_worker)
    forget_worker = _twin(Queue.forget_worker)
    workers = _twin(Queue.workers)
    configure = _twin(Queue.configure)
    settings = _twin(Queue.settings)

    async def wait_for_result(
        self,
        task_id: str,
        timeout: Number,
        *,
        poll: Number = DEFAULT_POLL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> Any:
        """Queue.wait_for_result as a coroutine: each look at the task runs in the
        AsyncQueue's thread, and the pauses are ``sleep``'s (``asyncio.sleep``), so
        the loop and the AsyncQueue's other calls go on while it waits."""
        waiting = ResultWait(task_id, timeout, poll, clock)
        look = functools.partial(self.sync._outcome, waiting.task_id)
        while (pause := waiting.pause(await self._run(look))) is not None:
            await sleep(pause)
        return waiting.value

    async def close(self) -> None:
        """Close the Queue, then end the AsyncQueue's thread."""
        await self._run(self.sync.close)
        self._closed = True
        self._thread.shutdown(wait=False)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
