"""A fair turn at SQLite's write lock for the processes that share a database.

SQLite's own busy handler makes a waiting connection sleep longer and longer
(1, 2, 5, 10 ... ms), so a process that commits and begins again at once keeps
the write lock while the others sleep: four worker processes once got 5,080 /
0 / 14,919 / 1 tasks.  Polling faster instead burns the CPU the lock holder
needs.  The gate queues the waiters in the kernel: every sqlq write transaction
first takes an exclusive ``flock`` on ``<database>.sqlq-gate``.  A waiter
blocks without using the CPU; when the holder lets go, the kernel wakes a
waiter at once, and since the holder has Python work to do before its next
transaction, the waiter usually gets the next turn.

The gate only orders sqlq's own writers; SQLite's lock still guarantees
correctness (a writer that does not use the gate, such as the sqlite3 shell,
is waited for as before).  ``flock`` locks belong to an open file, so two
queues in one process each have their own, and a lock dies with its process
(SIGKILL included).  Waiting is bounded: a thread of the gate does the blocking
``flock`` while the caller waits for it until a deadline (the call's, see the
backend) or an earlier cutoff set by ``interrupt``, so a frozen holder
(SIGSTOP) makes others fail with Busy after busy_timeout, never hang.
"""

from __future__ import annotations

import fcntl
import math
import os
import threading
import time

from ..errors import CannotOpen
from .files import DEFAULT_FILE_MODE, open_side_file


class Gate:
    def __init__(self, path: str, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self.mode = mode
        try:
            # Two open files: the caller's quick try, and the gate thread's blocking
            # wait.  flock locks belong to an open file, so the two exclude each other
            # and each is released through the file that holds it.
            self._quick = self._open()
            self._waiter = self._open()
        except OSError as exc:
            raise CannotOpen(f"{path}: cannot open the write gate ({exc.strerror})") from exc
        self._held: int | None = None  # the file that holds the lock
        self._cond = threading.Condition()
        self._wanted = 0  # the id of the acquire() waiting for the thread, or 0
        self._granted = 0  # the last id the thread got the lock for
        self._next = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._cutoff = math.inf  # see interrupt()

    def _open(self) -> int:
        return open_side_file(self.path, self.mode)

    def acquire(self, deadline: float) -> bool:
        """Take the gate by ``deadline`` (time.monotonic()), or by the cutoff if that is
        sooner; False if it stayed taken."""
        try:
            fcntl.flock(self._quick, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._held = self._quick
            return True
        except BlockingIOError:
            pass
        with self._cond:
            self._next += 1
            me = self._wanted = self._next
            if self._thread is None:
                self._thread = threading.Thread(target=self._block, name="sqlq-gate", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            while self._granted != me:
                left = min(deadline, self._cutoff) - time.monotonic()
                if left <= 0:
                    self._wanted = 0  # the thread lets go if it gets the lock later
                    return False
                self._cond.wait(left)
            self._held = self._waiter
            return True

    def interrupt(self, cutoff: float) -> None:
        """End every wait for the gate, current or later, by ``cutoff`` (time.monotonic();
        math.inf: no cutoff).  Safe in a signal handler: the condition's lock is
        reentrant."""
        with self._cond:
            self._cutoff = cutoff
            self._cond.notify_all()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the gate's files.  The waiting file belongs to the gate's thread once
        it exists: the thread may be blocked in flock() on it (a frozen holder), and
        closing it under the thread would let its later unlock hit a reused number."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread_owns_waiter = self._thread is not None
        os.close(self._quick)
        if not thread_owns_waiter:
            os.close(self._waiter)

    def close_copy(self) -> None:
        """In a forked child: close the child's copies of the gate's files, never
        unlocking them.  A flock belongs to the open file, which the parent shares:
        an unlock here would unlock the parent, while closing a copy leaves its lock
        alone.  The gate's thread, if any, stayed in the parent."""
        os.close(self._quick)
        os.close(self._waiter)

    def _block(self) -> None:
        """The gate's thread: wait in the kernel on behalf of whoever asks; on close,
        let go of the lock and close the waiting file."""
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(
                        lambda: self._wanted not in (0, self._granted) or self._closed
                    )
                    if self._closed:
                        return
                fcntl.flock(self._waiter, fcntl.LOCK_EX)
                with self._cond:
                    if not self._closed and self._wanted not in (0, self._granted):
                        self._granted = self._wanted
                        self._cond.notify_all()
                    else:  # the caller gave up meanwhile, or the gate closed
                        fcntl.flock(self._waiter, fcntl.LOCK_UN)
        finally:
            os.close(self._waiter)
