"""How a PostgreSQL backend's call gets its turn and its first round trip: the thread
lock (one call at a time per backend object), a live connection (made again when
the server closed the idle one), BEGIN sent with the first statement, and
``interrupt_waits``, which cancels a call still waiting on the server.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from ..errors import Busy
from .connections import Connections
from .driver import psycopg
from .queries import Q

T = TypeVar("T")


class Calls(Connections):
    """The second layer of PostgresBackend: a call's turn and first round trip."""

    def start_call(self, deadline: float) -> Any:
        """Take the thread lock (waiting until ``deadline``, a time.monotonic()) and
        make sure of a connection; returns its cursor.  end_call gives the lock back."""
        if not self._lock.acquire(True, max(0.0, deadline - time.monotonic())):
            raise Busy(f"{self._name}: other calls on this queue object held it")
        try:
            with self._cancelling, self._guard():  # (see _cancel_if_waiting)
                self._connection()
            self._in_call = True
        except BaseException:
            self._lock.release()
            raise
        return self._cursor

    def send_first(
        self, statement: str, params: dict[str, Any], begin: bool = False, commits: bool = False
    ) -> Any:
        """A call's first statement, after BEGIN in the same round trip if ``begin``.
        Returns the cursor, holding the statement's rows.

        If the server has started closing the connection while it sat idle (a
        restart, a timeout, pg_terminate_backend: it says so on the connection,
        where nothing else arrives between calls), a new one is made first.  Should
        the held one still turn out dead, the statements are sent again on a new
        connection, except one that ``commits`` on its own (a write in
        autocommit): that is never sent twice."""
        if self._poller.poll(0):
            self._disconnect()
            self._connection()
        if commits:
            return self._cursor.execute(statement, params)

        def send() -> Any:
            cur = self._cursor
            if not begin:
                return cur.execute(statement, params)
            with self._conn.pipeline():
                cur.execute(Q.begin)
                cur.execute(statement, params)
            return cur

        return self._on_live_connection(send)

    def _on_live_connection(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, and once more on a new connection if the held one turns out
        to have died while idle (then nothing of the attempt reached the server)."""
        try:
            return attempt()
        except psycopg.OperationalError:
            if not self._conn.closed:
                raise
            self._disconnect()
            self._connection()
            return attempt()

    def end_call(self) -> None:
        self._in_call = False
        self._lock.release()

    def _read(self, attempt: Callable[[Any], T]) -> T:
        """A read outside any transaction (one statement: one snapshot), holding the
        thread lock."""
        self.start_call(time.monotonic() + self.busy_timeout)
        try:
            with self._guard():
                return self._on_live_connection(lambda: attempt(self._cursor))
        finally:
            self.end_call()

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls ``after`` seconds from now at the
        latest: a call still running then is cancelled on the server (it raises
        Busy and changes nothing).  None: waits last busy_timeout again."""
        if after is None:
            self._cutoff = math.inf
            return
        self._cutoff = time.monotonic() + after
        timer = threading.Timer(after, self._cancel_if_waiting)
        timer.daemon = True
        timer.start()

    def _cancel_if_waiting(self) -> None:
        # The server may signal the cancel to the session after the call it was meant
        # for has ended: a call starts only once the cancel is sent (see start_call),
        # so that it lands while the session waits for the next statement, where the
        # server ignores it, not on a statement of the next call.
        with self._cancelling:
            conn = self._conn
            if self._in_call and conn is not None and time.monotonic() >= self._cutoff:
                with suppress(Exception):
                    conn.cancel_safe(timeout=1.0)
