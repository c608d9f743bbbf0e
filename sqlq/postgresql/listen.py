"""New tasks announced with NOTIFY, heard with LISTEN: idle workers wake at once.

A call that makes a task AVAILABLE (add, a wake-up, a retry, a redrive) sends
``pg_notify(channel, '')`` before it commits; PostgreSQL delivers it when (and
only if) the transaction commits.  A ``Listener`` holds one connection of its
own, LISTENing on the channel of every queue someone subscribed to, and calls
their callbacks when a notification arrives.  If its connection is lost it
connects again (pausing between tries) and then calls every callback once,
since announcements may have been missed meanwhile.

LISTEN needs a session of its own: behind a pooler in transaction mode
(pgbouncer) it hears nothing; open the Queue with ``listen=False`` there and
workers poll (``ready()``) as on SQLite.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from .driver import psycopg

log = logging.getLogger("sqlq")

#: How long one wait for notifications lasts before the listener looks at its
#: subscriptions and whether it should stop (seconds).
WAIT = 0.5
#: Pauses between tries to connect again (seconds): doubling up to the longest.
RETRY_MIN, RETRY_MAX = 0.1, 5.0
#: How long ``subscribe`` waits for the channel to be listened to (seconds): after
#: it returns, no announcement is missed (unless the server could not be reached).
SUBSCRIBE_WAIT = 10.0


def channel(schema: str, queue: str) -> str:
    """The notification channel of a queue in a schema: an identifier LISTEN takes
    as it is (no quoting), whatever the names."""
    return "sqlq_" + hashlib.sha256(f"{schema}:{queue}".encode()).hexdigest()[:32]


class Listener:
    """One LISTENing connection and a thread calling back the subscribers."""

    def __init__(self, connect: Callable[[], Any], name: str) -> None:
        self._connect = connect
        self._name = name
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[Callable[[], None]]] = {}
        self._heard: dict[str, threading.Event] = {}  # set once LISTEN ran for it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, chan: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (in the listener's thread) whenever ``chan`` is
        notified, from the moment this returns (it waits, SUBSCRIBE_WAIT at most, for
        the listener to LISTEN on ``chan``); returns the function that cancels this."""
        with self._lock:
            self._callbacks.setdefault(chan, []).append(callback)
            heard = self._heard.setdefault(chan, threading.Event())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sqlq-listen", daemon=True)
                self._thread.start()
        heard.wait(SUBSCRIBE_WAIT)

        def cancel() -> None:
            with self._lock:
                found = self._callbacks.get(chan, [])
                if callback in found:
                    found.remove(callback)

        return cancel

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * WAIT)

    def _run(self) -> None:
        pause = RETRY_MIN
        first = True
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as exc:
                log.debug("listener for %s cannot connect: %s", self._name, exc)
                self._stop.wait(pause)
                pause = min(2 * pause, RETRY_MAX)
                continue
            pause = RETRY_MIN
            try:
                with conn:
                    self._listen(conn, missed=not first)
            except psycopg.Error as exc:
                log.info(
                    "listener for %s lost its connection, connecting again: %s", self._name, exc
                )
            first = False

    def _listen(self, conn: Any, missed: bool) -> None:
        heard: set[str] = set()
        with self._lock:
            for event in self._heard.values():
                event.clear()  # a new connection listens to nothing yet
        while not self._stop.is_set():
            with self._lock:
                wanted = [chan for chan, found in self._callbacks.items() if found]
            for chan in wanted:
                if chan not in heard:
                    conn.execute(f"LISTEN {chan}")  # a hex name: an identifier as it is
                    heard.add(chan)
                    with self._lock:
                        self._heard[chan].set()
            if missed:  # announcements made while no connection listened
                missed = False
                for chan in wanted:
                    self._call(chan)
            for note in conn.notifies(timeout=WAIT):
                self._call(note.channel)

    def _call(self, chan: str) -> None:
        with self._lock:
            found = list(self._callbacks.get(chan, ()))
        for callback in found:
            try:
                callback()
            except Exception:  # a subscriber's bug must not end the listening
                log.exception("a callback of the listener for %s failed", self._name)
