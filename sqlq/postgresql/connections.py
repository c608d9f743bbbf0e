"""A PostgreSQL backend's connection and the translation of its errors.

SQLAlchemy's pool (queue.engine's too) makes the connections, each set up alike
(``_on_connect``); the queue's own calls run on one connection the backend
holds.  After ``fork()`` the child never uses (nor closes: that would end the
parent's session) a connection it inherited; it opens its own on first use.
psycopg errors leave as sqlq errors; a broken connection is dropped.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import sqlalchemy as sa

from ..errors import Busy, InvalidArgument, QueueClosed
from . import driver
from .driver import psycopg
from .listen import Listener
from .queries import Q
from .urls import shown

#: Connections a forked child inherited open: kept referenced, never closed there
#: (closing one would end the parent's session on the server).
inherited: list[Any] = []
live: weakref.WeakSet[Connections] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(live):
        backend._start_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Connections:
    """The first layer of PostgresBackend: its connection and error translation.  The
    attributes below are set by PostgresBackend.__init__ (the one path that opens a
    database)."""

    strict: bool
    synchronous: str
    busy_timeout: float
    listen: bool
    schema_found: int
    schema_version: int
    _name: str
    _engine: sa.Engine
    _idle_limit_ms: int
    _lock: threading.Lock
    _cancelling: threading.Lock
    _fairy: Any
    _conn: Any
    _cursor: Any
    _poller: Any
    _schema: str
    _closed: bool
    _cutoff: float
    _in_call: bool
    _listener: Listener | None
    _channels: dict[str, str]

    @property
    def name(self) -> str:
        return self._name

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        """Every connection of the engine (the queue's and queue.engine's): waits for
        a lock end after busy_timeout; commits wait for the flush or not."""
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('synchronous_commit', %s, false)",
                (
                    f"{int(self.busy_timeout * 1000)}ms",
                    "on" if self.synchronous == "full" else "off",
                ),
            )
        finally:
            dbapi_conn.autocommit = False

    def _connection(self) -> Any:
        if self._conn is None:
            if self._closed:
                raise QueueClosed(f"{self._name}: the queue is closed")
            try:
                self._fairy = self._engine.raw_connection()
            except psycopg.Error as exc:  # the pool's connect raises psycopg's own errors
                raise driver.translate(exc, self._name, connecting=True) from exc
            self._conn = self._fairy.driver_connection
            self._conn.autocommit = True  # sqlq sends BEGIN and COMMIT itself
            # The transactions psycopg begins (the migrations') are READ COMMITTED too,
            # as Q.begin's are, whatever default_transaction_isolation the user set.
            self._conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            # A process frozen inside a call (SIGSTOP, a debugger) would hold its rows
            # and the queue's turn for expiries: the server ends its session after this.
            self._conn.execute(Q.limit_idle_in_transaction, {"ms": self._idle_limit_ms})
            self._cursor = self._conn.cursor()
            self._poller = select.poll()  # see send_first
            self._poller.register(self._conn.fileno(), select.POLLIN)
        return self._conn

    def _disconnect(self) -> None:
        """Drop the connection (after it broke): the next call makes a new one."""
        self._cursor = None
        if self._fairy is not None:
            with suppress(Exception):
                self._fairy.invalidate()
        self._fairy = self._conn = None

    def _start_in_child(self) -> None:
        if self._listener is not None:  # its thread is the parent's: kept, never closed
            inherited.append(self._listener)
            self._listener = None
        if self._fairy is not None:
            inherited.append((self._fairy, self._conn, self._cursor))
            self._fairy = self._conn = self._cursor = None
        self._engine.dispose(close=False)
        self._lock = threading.Lock()
        self._cancelling = threading.Lock()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """psycopg errors raised inside as sqlq errors (the cause kept); a broken
        connection is dropped."""
        try:
            yield
        except psycopg.Error as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: BaseException) -> Exception:
        if self._conn is not None and self._conn.closed:
            self._disconnect()
        if self._cutoff <= time.monotonic() and getattr(exc, "sqlstate", None) == "57014":
            return Busy(
                f"{self._name}: the call was cut short by interrupt_waits (a stopping "
                "worker's grace period is over)"
            )
        return driver.translate(exc, self._name)

    def _external_connection(self, external: Any) -> Any:
        if self._closed:
            raise QueueClosed(f"{self._name}: the queue is closed")
        if not isinstance(external, sa.Connection):
            raise InvalidArgument(
                f"conn must be a SQLAlchemy Connection, not {type(external).__name__}"
            )
        if shown(external.engine.url) != self._name:
            raise InvalidArgument(f"conn is not connected to the queue's database {self._name}")
        if not external.in_transaction():
            raise InvalidArgument("conn must be in an open transaction (with engine.begin())")
        conn: Any = external.connection.driver_connection
        if not isinstance(conn, psycopg.Connection):
            raise InvalidArgument("conn must use psycopg 3 (queue.engine does)")
        return conn
