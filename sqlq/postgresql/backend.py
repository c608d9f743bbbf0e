"""The PostgreSQL backend: many machines, one database server, calls that run
concurrently.

SQLAlchemy (its psycopg dialect and pool) makes the connections; the calls run
the named statements of queries.sql through psycopg on a connection the backend
holds, with no ORM or expression compilation on the hot path.

Concurrency model:

* Between processes: calls run at once.  Claims take the front of the line
  ``FOR UPDATE SKIP LOCKED`` (a row another call is claiming is passed over);
  every completion, failure and heartbeat is a compare-and-set on (state, token)
  *and* ``deadline > now``, so a lease that ran out is refused whether or not a
  call has applied its expiry yet.  Due events (expired leases, WAITING tasks
  whose time came) are applied inside the calls, as on SQLite, by whichever call
  wins the queue's transaction-scoped advisory lock (tried only when a probe of
  the partial indexes finds something due); the others go on without waiting.
* ``strict=True``: every call first takes that advisory lock and waits for it,
  so a queue's calls run one at a time and answer exactly as SQLite's would.
* Within a process: one connection per backend object, calls serialised by a
  lock (a Queue can be shared by threads).
* Time: the server's clock when the caller gives none (one clock for every
  machine), else the caller's ``now``, never below the high-water mark, as on
  SQLite.  Calls at the server's time keep the mark at most MARK_LAG behind it.
* A lost connection (server restart, ``pg_terminate_backend``, a pooler's
  timeout) raises :class:`sqlq.errors.Unavailable` from the call that saw it; the
  next call connects again.  A call that finds its idle connection dead before
  anything was sent connects again at once and goes on.
* Across ``fork``: the child never uses (nor closes: that would end the parent's
  session) a connection it inherited; it opens its own on first use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import sqlalchemy as sa

from ..backend import Opened
from ..contract import Number
from ..errors import InvalidConfig, QueueClosed
from ..sqlstore import SqlReads
from .connections import live
from .inspection import Inspection
from .listen import Listener, channel
from .migrate import check_schema, ensure_schema, latest_version
from .queries import Q
from .rows import task_row
from .text import stored
from .transaction import MARK_LAG as MARK_LAG
from .transaction import PostgresTransaction as PostgresTransaction
from .urls import engine_url as engine_url
from .urls import shown as shown

#: The least time (seconds) the server lets the queue's own session sit idle inside
#: a transaction before it ends the session (idle_in_transaction_session_timeout:
#: busy_timeout, or this if longer).  sqlq's calls never pause between statements.
IDLE_IN_CALL_MIN = 5.0


#: The migration that made sqlq_settings (a queue's stored settings).
SETTINGS_SINCE = 11


class PostgresBackend(Inspection, SqlReads):
    """A PostgreSQL database (the first schema of its search_path) holding queues."""

    keeps_time = True
    q = Q
    stored = staticmethod(stored)
    task_row = staticmethod(task_row)
    settings_since = SETTINGS_SINCE

    def __init__(
        self,
        url: str,
        *,
        strict: bool = False,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
        migrate: bool = True,
        listen: bool = True,
        force_migration: bool = False,
    ) -> None:
        """Open (and by default create or migrate) sqlq's tables in the database.

        ``synchronous``: "full" waits for the server's WAL flush at each commit
        (``synchronous_commit = on``); "normal" does not (``off``: a server crash
        may lose the last commits, never corrupt).  ``busy_timeout``: seconds a
        call may wait for a lock (``lock_timeout``), then Busy.  ``listen``: hear
        announcements of new tasks (LISTEN, which needs a session of its own: False
        behind a pooler in transaction mode; workers then poll).  A migration is
        refused (WorkersRunning) while live workers of an older schema run, unless
        ``force_migration``.
        """
        if not isinstance(url, str):
            raise InvalidConfig(f"expected a postgresql:// URL, not {type(url).__name__}")
        for flag, value in (
            ("strict", strict),
            ("listen", listen),
            ("migrate", migrate),
            ("force_migration", force_migration),
        ):
            if not isinstance(value, bool):
                raise InvalidConfig(f"{flag} must be True or False, not {value!r}")
        if synchronous not in ("full", "normal"):
            raise InvalidConfig(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidConfig("busy_timeout must be a number of seconds")
        if not 0 < busy_timeout <= 86400:
            raise InvalidConfig(f"busy_timeout must be in (0, 86400], got {busy_timeout}")
        parsed = engine_url(url)
        self._name = shown(parsed)
        self.strict = strict
        self.synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        # pool_pre_ping: a connection of queue.engine that the server closed meanwhile
        # (a restart, idle_session_timeout) is replaced before the caller's transaction
        # uses it; the queue's own connection is checked out once and reconnects itself.
        self._engine = sa.create_engine(parsed, pool_size=2, max_overflow=8, pool_pre_ping=True)
        sa.event.listen(self._engine, "connect", self._on_connect)
        self._idle_limit_ms = int(max(self.busy_timeout, IDLE_IN_CALL_MIN) * 1000)
        self._lock = threading.Lock()
        self._cancelling = threading.Lock()  # held while a cancel is being sent
        self._fairy: Any = None  # SQLAlchemy's wrapper, owning the psycopg connection
        self._conn: Any = None
        self._cursor: Any = None
        self._poller: Any = None
        self._schema: str = ""
        self._closed = False
        self._cutoff = math.inf  # waits end by this time.monotonic() (interrupt_waits)
        self._in_call = False
        self.listen = listen
        self._listener: Listener | None = None
        self._channels: dict[str, str] = {}
        live.add(self)
        try:
            with self._lock, self._guard():
                conn = self._connection()
                if migrate:
                    self.schema_found = ensure_schema(conn, self._name, force_migration)
                    self.schema_version = latest_version()
                else:
                    self.schema_found = self.schema_version = check_schema(conn, self._name)
                (self._schema,) = conn.execute(Q.current_schema).fetchone()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            self._closed = True
            if self._fairy is not None:
                with suppress(Exception):
                    self._fairy.close()
            self._fairy = self._conn = self._cursor = None
            self._engine.dispose()
            live.discard(self)

    def transaction(
        self, now: Number | None, queue: str, external: Any, opened: Opened, one_write: bool = False
    ) -> PostgresTransaction:
        return PostgresTransaction(self, now, queue, external, opened, one_write)

    @property
    def schema(self) -> str:
        """The schema sqlq's tables are in (the first of the search_path on opening)."""
        return self._schema

    def channel(self, queue: str) -> str:
        found = self._channels.get(queue)
        if found is None:
            found = self._channels[queue] = channel(self._schema, queue)
        return found

    def subscribe(self, queue: str, callback: Callable[[], None]) -> Callable[[], None] | None:
        if not self.listen:
            return None
        with self._lock:
            if self._closed:
                raise QueueClosed(f"{self._name}: the queue is closed")
            if self._listener is None:
                self._listener = Listener(self._listening_connection, self._name)
        return self._listener.subscribe(self.channel(queue), callback)

    def _listening_connection(self) -> Any:
        """A connection of the listener's own, outside the pool (it stays in LISTEN)."""
        fairy = self._engine.raw_connection()
        conn: Any = fairy.driver_connection
        fairy.detach()
        conn.autocommit = True
        return conn

    def clock_reference(self) -> float | None:
        return None  # calls without a time take the server's clock: nothing to check
