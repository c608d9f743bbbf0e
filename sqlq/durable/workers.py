"""What a Queue offers its workers beyond the leases: the worker registry (see
sqlq.registry), announcements of new tasks, and bounding waits for a lock."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable

from ..backend import WorkerRow
from ..contract import (
    MAX_LIMIT,
    Number,
    check_count,
    check_name,
    check_seconds,
    check_time,
    time_after,
)
from ..errors import InvalidArgument
from ..records import WorkerInfo
from ..registry import KEEP_STALE, STALE_BEATS, held_json, listed
from .calls import Calls


class Workers(Calls):
    """beat_worker, forget_worker, workers, on_new_tasks, interrupt_waits."""

    def beat_worker(
        self,
        worker_id: str,
        now: Number | None = None,
        *,
        every: Number,
        concurrency: int = 1,
        holds: Iterable[tuple[str, int, Number]] = (),
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        """Record in the worker registry that the worker ``worker_id`` of this queue is
        alive and holds ``holds`` (task id, token, and the queue's time of its claim,
        for each lease), and that it writes again every ``every`` seconds (it is stale
        if it does not); ``host`` and ``pid`` default to this process's.  What a Worker
        calls when it starts and once per heartbeat interval.  Also deletes the rows
        of workers stale for longer than sqlq.registry.KEEP_STALE."""
        worker_id = check_name(worker_id, "worker id", InvalidArgument)
        every = check_seconds(every, "every")
        if not every:
            raise InvalidArgument("every must be more than 0 seconds")
        concurrency = check_count(concurrency, "concurrency", MAX_LIMIT)
        host = socket.gethostname() if host is None else check_name(host, "host", InvalidArgument)
        pid = os.getpid() if pid is None else check_count(pid, "pid", MAX_LIMIT, least=0)
        held = held_json(holds)
        with self._call(now) as tx:
            at = tx.now
            stale_at = time_after(at, STALE_BEATS * every)
            tx.prune_workers(at - KEEP_STALE)
            tx.beat_worker(
                WorkerRow(worker_id, self.queue, host, pid, concurrency, at, at, stale_at, held)
            )

    def forget_worker(self, worker_id: str, now: Number | None = None) -> bool:
        """Delete the worker's row from the worker registry (a Worker that stops cleanly
        does); False if there was none."""
        worker_id = check_name(worker_id, "worker id", InvalidArgument)
        with self._call(now) as tx:
            return tx.forget_worker(worker_id)

    def workers(self, now: Number | None = None) -> list[WorkerInfo]:
        """The workers of this queue in the worker registry, as last written (reads only,
        takes no write lock), each marked stale if it missed its writes by ``now`` (by
        default the queue's time, read from the database: its mark, or the database's
        clock if later, never this host's clock alone); those stale for longer than
        sqlq.registry.KEEP_STALE are left out."""
        database_time, rows = self._backend.workers()
        if now is not None:
            at = check_time(now)
        elif self._clock is time.time:  # the queue's time, as its calls wrote the rows
            at = database_time
        else:  # a clock of the caller's
            at = check_time(self._clock())
        mine = (row for row in rows if row.queue == self.queue)
        return listed(mine, at, self._backend.find)

    def on_new_tasks(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Have ``callback()`` called (in a thread of the queue's) soon after another
        process or thread commits a task that becomes AVAILABLE in this queue, where
        the database announces it (PostgreSQL's LISTEN/NOTIFY, unless opened with
        ``listen=False``).  Returns the function that stops the calls, or None where
        nothing is announced (SQLite): poll ``ready()`` then.  A Worker uses it to
        claim at once instead of polling fast.  Never waits."""
        if not callable(callback):
            raise InvalidArgument(f"callback must be callable, not {type(callback).__name__}")
        return self._backend.subscribe(self.queue, callback)

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls for a lock, those already waiting
        included, ``after`` seconds from now at the latest: the call then raises
        ``Busy`` (a call whose lock is free goes through).  ``None`` lifts the limit:
        waits last ``busy_timeout`` again.  Thread-safe and safe in a signal handler;
        a stopping ``Worker`` uses it so that its grace period bounds every wait."""
        self._backend.interrupt_waits(None if after is None else check_seconds(after, "after"))
